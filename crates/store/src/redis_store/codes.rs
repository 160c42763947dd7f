//! [`CodeRedemptions`] on Redis: one `SET … NX PX` per redemption, so exactly one of any
//! number of nodes redeeming a code at once wins, and the record expires with the code.

use async_trait::async_trait;

use super::RedisStore;
use crate::StoreError;
use crate::codes::{CodeRedemptions, CodeUse, Redemption};

/// Margin kept past a code's expiry, for nodes whose clocks run a little apart.
const MARGIN_MS: u64 = 5_000;

#[async_trait]
impl CodeRedemptions for RedisStore {
    async fn redeem(&self, code: CodeUse<'_>) -> Result<Redemption, StoreError> {
        let key = format!("{}:oidc-code:{}", self.prefix, code.code_id);
        let ttl_ms = code
            .expires_at
            .as_millis()
            .saturating_sub(code.now.as_millis())
            .saturating_add(MARGIN_MS);
        let mut command = redis::cmd("SET");
        command.arg(&key).arg(1).arg("NX").arg("PX").arg(ttl_ms);
        self.bounded("oidc code redemption", async {
            let connection = self.connection().await?;
            let answer: Option<String> = connection
                .query(&command)
                .await
                .map_err(|error| StoreError::backend("redis SET NX failed", error))?;
            Ok(match answer {
                Some(_) => Redemption::First,
                None => Redemption::Again,
            })
        })
        .await
    }
}
