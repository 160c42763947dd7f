//! Verified passes, cached per node (DESIGN "Data flow" 1): a signature check costs tens of
//! microseconds, more than proxying a small request, so each pass is verified once and then
//! found by the token itself until it expires.
//!
//! What a cached pass still needs is checked on use: its expiry, its room's current generation
//! (the room copy is at most a second old), and whether its session still holds: the session is
//! looked up in the store at most once a second per pass (one request looks it up while the
//! others go on; should it go away before the store answers, its client gone, the next request
//! looks), so a completed, abandoned or revoked session is refused within a second. Renewals
//! likewise: one request at a time, and one that goes away hands the renewal to the next.
//!
//! The cache is bounded: when full, expired passes are dropped, and if that is not enough the
//! cache starts over (every pass is then verified again once).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};
use smallvec::SmallVec;

use anteroom_core::{RoomId, SessionId};
use anteroom_token::{LEEWAY_SECS, PassClaims};

/// Passes kept at most.
const MAX_PASSES: usize = 100_000;

/// A session is looked up in the store at most this often per pass.
pub(crate) const RECHECK_MS: u64 = 1_000;

/// `checked_at_ms` of a pass whose session was never looked up.
const NEVER: u64 = u64::MAX;

/// The passes a request holds, room by room: inline while it holds one (a route of one room,
/// the usual case), so a request let through with its pass allocates no list for it.
pub(crate) type HeldPasses = SmallVec<[HeldPass; 1]>;

/// A pass the request holds, for the proxy (`Anteroom-Release`). A pass is held only for
/// the room it was verified or issued for, so its room is the cached pass's own: no copy of
/// the room's id per request.
#[derive(Clone)]
pub(crate) struct HeldPass {
    pub(crate) pass: Arc<CachedPass>,
}

impl HeldPass {
    /// The room the pass is held for.
    pub(crate) fn room(&self) -> &RoomId {
        &self.pass.room
    }
}

/// A verified pass.
pub(crate) struct CachedPass {
    pub(crate) claims: PassClaims,
    pub(crate) room: RoomId,
    pub(crate) session: SessionId,
    /// When the session was last found active in the store (ms); [`NEVER`]: not yet.
    checked_at_ms: AtomicU64,
    checking: AtomicBool,
    revoked: AtomicBool,
    /// From when the session is due for renewal (ms).
    renew_due_ms: AtomicU64,
    renewing: AtomicBool,
    /// The pass that replaced this one on renewal, and when it expires (Unix seconds), so
    /// requests still carrying this one get the new cookie without another store call.
    replaced_by: Mutex<Option<(String, u64)>>,
}

impl CachedPass {
    /// A pass just verified. `checked` when its session was just read from the store (the
    /// gateway issued or renewed it itself); otherwise the first use looks the session up.
    pub(crate) fn new(
        claims: PassClaims,
        room: RoomId,
        session: SessionId,
        renew_due_ms: u64,
        checked_at_ms: Option<u64>,
    ) -> CachedPass {
        CachedPass {
            claims,
            room,
            session,
            checked_at_ms: AtomicU64::new(checked_at_ms.unwrap_or(NEVER)),
            checking: AtomicBool::new(false),
            revoked: AtomicBool::new(false),
            renew_due_ms: AtomicU64::new(renew_due_ms),
            renewing: AtomicBool::new(false),
            replaced_by: Mutex::new(None),
        }
    }

    /// Whether the pass can be used at `now_ms` in a room of `generation` (expiry with the
    /// same leeway as verification).
    pub(crate) fn usable(&self, room: &RoomId, generation: u32, now_ms: u64) -> bool {
        !self.revoked.load(Ordering::Acquire)
            && self.room == *room
            && self.claims.r#gen == generation
            && now_ms / 1000 < self.claims.exp.saturating_add(LEEWAY_SECS)
    }

    /// Whether this request should look the session up: the last look is a second old and no
    /// other request is looking. The look ends with [`SessionCheck::finish`]; a look dropped
    /// before it (the request went away while the store answered) lets the next request look.
    pub(crate) fn begin_check(&self, now_ms: u64) -> Option<SessionCheck<'_>> {
        let last = self.checked_at_ms.load(Ordering::Acquire);
        ((last == NEVER || now_ms.saturating_sub(last) >= RECHECK_MS)
            && !self.checking.swap(true, Ordering::AcqRel))
        .then_some(SessionCheck(self))
    }

    /// Refuses the pass from now on (its session ended).
    pub(crate) fn revoke(&self) {
        self.revoked.store(true, Ordering::Release);
    }

    /// Whether this request should renew the session: due, and no other request is renewing.
    /// The renewal ends with [`Renewal::finish`]; a renewal dropped before it (the request went
    /// away while the store answered) lets the next request renew.
    pub(crate) fn begin_renewal(&self, now_ms: u64) -> Option<Renewal<'_>> {
        (now_ms >= self.renew_due_ms.load(Ordering::Acquire)
            && !self.renewing.swap(true, Ordering::AcqRel))
        .then_some(Renewal(self))
    }

    /// The pass that replaced this one on renewal, with its expiry (Unix seconds).
    pub(crate) fn replacement(&self) -> Option<(String, u64)> {
        self.replaced_by.lock().clone()
    }
}

/// A look at a pass's session in the store, begun by [`CachedPass::begin_check`]. While it is
/// held no other request looks; dropped, finished or not, it lets the next one (a request that
/// went away mid-look must not leave the pass unchecked from then on).
#[must_use]
pub(crate) struct SessionCheck<'p>(&'p CachedPass);

impl SessionCheck<'_> {
    /// The outcome of the look: `Some(true)` active, `Some(false)` ended (the pass is refused
    /// from now on), `None` the store could not say.
    pub(crate) fn finish(self, active: Option<bool>, now_ms: u64) {
        match active {
            Some(true) => self.0.checked_at_ms.store(now_ms, Ordering::Release),
            Some(false) => self.0.revoke(),
            None => {}
        }
    }
}

impl Drop for SessionCheck<'_> {
    fn drop(&mut self) {
        self.0.checking.store(false, Ordering::Release);
    }
}

/// A renewal of a pass's session, begun by [`CachedPass::begin_renewal`]. While it is held no
/// other request renews; dropped, finished or not, it lets the next one (a request that went
/// away mid-renewal must not stop the session's renewals on this node).
#[must_use]
pub(crate) struct Renewal<'p>(&'p CachedPass);

impl Renewal<'_> {
    /// The outcome of the renewal: the replacing pass and its expiry, or when the next renewal
    /// is due (`None` when the store could not renew; tried again at once).
    pub(crate) fn finish(self, replacement: Option<(String, u64)>, next_due_ms: Option<u64>) {
        let pass = self.0;
        if let Some(replacement) = replacement {
            *pass.replaced_by.lock() = Some(replacement);
            pass.renew_due_ms.store(u64::MAX, Ordering::Release);
        } else if let Some(due) = next_due_ms {
            pass.renew_due_ms.store(due, Ordering::Release);
        }
    }
}

impl Drop for Renewal<'_> {
    fn drop(&mut self) {
        self.0.renewing.store(false, Ordering::Release);
    }
}

/// The cache, keyed by the token.
#[derive(Default)]
pub(crate) struct PassesVerifiedUntilExpiry {
    /// Keyed by the token: ahash with per-process random keys (tokens are the visitors' to
    /// choose, so the hasher stays keyed; SipHash cost more than the lookup's other work).
    passes: RwLock<HashMap<Box<str>, Arc<CachedPass>, ahash::RandomState>>,
}

impl PassesVerifiedUntilExpiry {
    pub(crate) fn get(&self, token: &str) -> Option<Arc<CachedPass>> {
        self.passes.read().get(token).cloned()
    }

    pub(crate) fn insert(&self, token: &str, pass: Arc<CachedPass>, now_ms: u64) {
        let mut passes = self.passes.write();
        if passes.len() >= MAX_PASSES {
            let now_secs = now_ms / 1000;
            passes.retain(|_, pass| now_secs < pass.claims.exp.saturating_add(LEEWAY_SECS));
            if passes.len() >= MAX_PASSES {
                passes.clear();
            }
        }
        passes.insert(token.into(), pass);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pass(exp: u64) -> CachedPass {
        let claims = PassClaims {
            iss: "i".into(),
            aud: "room".into(),
            sub: "s".into(),
            jti: "s".into(),
            iat: 0,
            nbf: 0,
            exp,
            pos: 1,
            r#gen: 1,
            uid: None,
            scope: "room".into(),
        };
        let session = SessionId::random(&mut rand::thread_rng());
        CachedPass::new(claims, RoomId::new("room").unwrap(), session, 5_000, None)
    }

    #[test]
    fn usable_until_expiry_leeway_and_revocation() {
        let room = RoomId::new("room").unwrap();
        let pass = pass(100);
        assert!(pass.usable(&room, 1, 100_000));
        assert!(pass.usable(&room, 1, (100 + LEEWAY_SECS) * 1000 - 1));
        assert!(!pass.usable(&room, 1, (100 + LEEWAY_SECS) * 1000));
        assert!(!pass.usable(&room, 2, 1000));
        assert!(!pass.usable(&RoomId::new("other").unwrap(), 1, 1000));
        pass.revoke();
        assert!(!pass.usable(&room, 1, 1000));
    }

    #[test]
    fn one_check_a_second_one_renewal_at_a_time() {
        let pass = pass(100);
        let check = pass.begin_check(10).expect("never checked");
        assert!(
            pass.begin_check(20).is_none(),
            "another request is checking"
        );
        check.finish(Some(true), 20);
        assert!(pass.begin_check(20 + RECHECK_MS - 1).is_none());
        let check = pass.begin_check(20 + RECHECK_MS).expect("a second later");
        check.finish(Some(false), 2000);
        assert!(pass.revoked.load(Ordering::Acquire));

        assert!(pass.begin_renewal(4_999).is_none());
        let renewal = pass.begin_renewal(5_000).expect("due");
        assert!(
            pass.begin_renewal(5_000).is_none(),
            "another request is renewing"
        );
        renewal.finish(None, Some(9_000));
        assert!(pass.begin_renewal(8_999).is_none());
        let renewal = pass.begin_renewal(9_000).expect("due again");
        renewal.finish(Some(("new".into(), 60)), None);
        assert!(pass.begin_renewal(u64::MAX - 1).is_none());
        assert_eq!(pass.replacement(), Some(("new".into(), 60)));
    }

    #[test]
    fn a_check_or_renewal_whose_request_went_away_lets_the_next_request_do_it() {
        let pass = pass(100);
        // The request looking the session up is dropped while the store answers.
        drop(pass.begin_check(10).expect("never checked"));
        let check = pass.begin_check(20).expect("the next request looks");
        check.finish(Some(true), 20);
        assert!(
            pass.begin_check(30).is_none(),
            "looked up within the second"
        );

        drop(pass.begin_renewal(5_000).expect("due"));
        assert!(
            pass.begin_renewal(5_000).is_some(),
            "the next request renews"
        );
    }
}
