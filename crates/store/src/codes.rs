//! One-time OpenID Connect authorization codes (SPEC §11): where the redemption of a code is
//! recorded, so a code is exchanged once even when the visitor's token call reaches another
//! node than the one that issued the code.
//!
//! A code itself is self-contained (sealed by the HTTP layer, with its id, its issue time and
//! its expiry); the store only remembers which code ids were redeemed, until they expire.
//!
//! - [`MemoryCodeRedemptions`]: in this process, for one node (memory and embedded stores).
//!   Codes issued before it was created are refused as [`Redemption::Unknown`]: it cannot know
//!   whether a previous process redeemed them, and they live a minute at most.
//! - [`RedisStore`](crate::RedisStore): `SET <prefix>:oidc-code:<id> NX PX <ttl>`, shared by
//!   every node, kept until the code would have expired.

use std::collections::HashMap;

use anteroom_core::Timestamp;
use async_trait::async_trait;
use parking_lot::Mutex;

use crate::StoreError;

/// A code about to be redeemed.
#[derive(Debug, Clone, Copy)]
pub struct CodeUse<'a> {
    /// The code's random id.
    pub code_id: &'a str,
    /// When the code was issued.
    pub issued_at: Timestamp,
    /// When the code stops being redeemable; its record may be forgotten after that.
    pub expires_at: Timestamp,
    /// The time now.
    pub now: Timestamp,
}

/// What redeeming a code found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redemption {
    /// The first redemption: the code is now used.
    First,
    /// The code was redeemed before.
    Again,
    /// Whether the code was redeemed cannot be known (issued before this record began).
    Unknown,
}

/// The record of redeemed authorization codes.
#[async_trait]
pub trait CodeRedemptions: Send + Sync + 'static {
    /// Records that `code` is redeemed now, atomically: of any number of concurrent calls
    /// for one code id, on any node, exactly one answers [`Redemption::First`].
    async fn redeem(&self, code: CodeUse<'_>) -> Result<Redemption, StoreError>;
}

/// Redeemed codes in this process's memory, forgotten once expired.
#[derive(Debug)]
pub struct MemoryCodeRedemptions {
    started_at: Timestamp,
    used: Mutex<Used>,
}

/// Redeemed code ids with their expiry, and when expired ones are next swept out.
#[derive(Debug, Default)]
struct Used {
    codes: HashMap<String, Timestamp>,
    next_sweep: Timestamp,
}

/// How often expired records are swept out: at most once a second, so a crowd of
/// redemptions does not pay for a full sweep each.
const SWEEP_EVERY_MS: u64 = 1_000;

impl MemoryCodeRedemptions {
    /// An empty record that begins at `started_at`: older codes answer
    /// [`Redemption::Unknown`].
    pub fn new(started_at: Timestamp) -> MemoryCodeRedemptions {
        MemoryCodeRedemptions {
            started_at,
            used: Mutex::new(Used::default()),
        }
    }
}

#[async_trait]
impl CodeRedemptions for MemoryCodeRedemptions {
    async fn redeem(&self, code: CodeUse<'_>) -> Result<Redemption, StoreError> {
        if code.issued_at < self.started_at {
            return Ok(Redemption::Unknown);
        }
        let mut used = self.used.lock();
        if code.now >= used.next_sweep {
            used.codes.retain(|_, expires_at| *expires_at > code.now);
            used.next_sweep = Timestamp(code.now.as_millis().saturating_add(SWEEP_EVERY_MS));
        }
        if used.codes.contains_key(code.code_id) {
            return Ok(Redemption::Again);
        }
        // Kept at least until the code expires (a swept record's code is refused as expired).
        used.codes
            .insert(code.code_id.to_owned(), code.expires_at.max(code.now));
        Ok(Redemption::First)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(id: &str, issued_at: u64, now: u64) -> CodeUse<'_> {
        CodeUse {
            code_id: id,
            issued_at: Timestamp(issued_at),
            expires_at: Timestamp(issued_at + 60_000),
            now: Timestamp(now),
        }
    }

    #[tokio::test]
    async fn a_code_is_redeemed_once() {
        let record = MemoryCodeRedemptions::new(Timestamp(1_000));
        let redeem = |id, issued_at, now| record.redeem(code(id, issued_at, now));
        assert_eq!(
            redeem("a", 2_000, 2_500).await.ok(),
            Some(Redemption::First)
        );
        assert_eq!(
            redeem("a", 2_000, 3_000).await.ok(),
            Some(Redemption::Again)
        );
        assert_eq!(
            redeem("b", 2_000, 3_000).await.ok(),
            Some(Redemption::First)
        );
        assert_eq!(
            redeem("c", 500, 3_000).await.ok(),
            Some(Redemption::Unknown)
        );
        // Expired records are forgotten (the code itself is refused as expired by then).
        redeem("d", 70_000, 70_000).await.ok();
        assert_eq!(record.used.lock().codes.len(), 1);
    }
}
