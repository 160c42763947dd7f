//! The OpenID Connect adapter (SPEC §11): a room is an OIDC client (`client_id` = room id),
//! and "logging in" means getting through the room's queue.
//!
//! - `discovery.rs`: `/.well-known/openid-configuration`.
//! - `authorize.rs`: `/_anteroom/oidc/authorize` checks the request, seals it into the
//!   `return` of the waiting page, and `/_anteroom/oidc/continue` (where the page sends the
//!   visitor once admitted) answers the redirect URI with a one-time code.
//! - `code.rs`: the pending request and the code, both sealed values (MAC'd under the
//!   ticket secret), so they survive a wait, a refresh and another node without any state.
//! - `token.rs`: `/_anteroom/oidc/token` redeems a code once (the redemption is recorded
//!   in the store, shared by every node) and signs the ID and access tokens with the node's
//!   key; `userinfo.rs` checks an access token and its session.
//! - `protocol.rs`: the endpoints' paths, OAuth errors and form parameters, shared by all.
//!
//! The token and userinfo endpoints answer errors in the RFC 6749 §5.2 / RFC 6750 §3 JSON
//! form (`{"error": …}`) that OIDC clients expect, not as problem+json.

mod authorize;
mod code;
mod discovery;
mod protocol;
mod token;
mod userinfo;

pub(crate) use authorize::{authorize, resume};
pub(crate) use discovery::discovery;
pub(crate) use protocol::{AUTHORIZE_PATH, CONTINUE_PATH, TOKEN_PATH, USERINFO_PATH};
pub(crate) use token::token;
pub(crate) use userinfo::userinfo;
