//! The `Date` header's value, formatted once a second per thread.

use std::cell::RefCell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

thread_local! {
    static CACHED: RefCell<(u64, [u8; 29])> = const { RefCell::new((u64::MAX, [0; 29])) };
}

/// Appends the current time as an HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`).
pub fn append_now(out: &mut Vec<u8>) {
    // `Date` is the wall clock by definition (RFC 9110 §6.6.1), as hyper writes it; no
    // admission decision reads it.
    #[allow(clippy::disallowed_methods)]
    let now = SystemTime::now();
    let second = now
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    CACHED.with(|cached| {
        let mut cached = cached.borrow_mut();
        if cached.0 != second {
            let text = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(second));
            if let Ok(bytes) = <[u8; 29]>::try_from(text.as_bytes()) {
                *cached = (second, bytes);
            }
        }
        out.extend_from_slice(&cached.1);
    });
}
