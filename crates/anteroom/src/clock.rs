//! The system clock: the one place the binary reads the time of day (`clippy.toml` bans
//! `SystemTime::now` everywhere else; the rest of the code reads time through a `Clock`).

use std::time::{SystemTime, UNIX_EPOCH};

use anteroom_core::{Clock, Timestamp};

/// Wall-clock time from the operating system.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)]
    fn now(&self) -> Timestamp {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Timestamp(u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX))
    }
}
