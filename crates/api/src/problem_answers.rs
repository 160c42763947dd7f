//! The problem answers and text schemas the handlers' `#[utoipa::path]` name: each answer (a
//! status and what it means) is declared once in `problem_answers!` and is an RFC 9457
//! problem ([`crate::error::Problem`]). They live here, beside the public handlers that name
//! them; the admin crate assembles the whole document from them and its own handlers.

use std::collections::BTreeMap;

use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{IntoResponses, PartialSchema, ToSchema};

use crate::error::Problem;

/// The problem answers of `statuses`: each a problem+json [`Problem`] with its description.
fn problems(statuses: &[(u16, &str)]) -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
    statuses
        .iter()
        .map(|(status, description)| {
            let problem = ContentBuilder::new()
                .schema(Some(Ref::from_schema_name(Problem::name())))
                .build();
            let response = ResponseBuilder::new()
                .description(*description)
                .content("application/problem+json", problem)
                .build();
            (status.to_string(), RefOr::T(response))
        })
        .collect()
}

/// Declares problem answers for `responses(...)` of `#[utoipa::path]`: a type per answer
/// (`Name { status => "description" }`), or per group of answers (`Name = [A, B]`). The
/// types are never built: they only name their answers.
macro_rules! problem_answers {
    ($($(#[$doc:meta])* $name:ident $({ $($status:literal => $description:literal),+ $(,)? })? $(= [$($part:ident),+ $(,)?])?;)+) => {
        $(
            $(#[$doc])*
            pub enum $name {}

            impl IntoResponses for $name {
                fn responses() -> BTreeMap<String, RefOr<utoipa::openapi::Response>> {
                    let own = problems(&[$($(($status, $description)),+)?]);
                    let parts: Vec<BTreeMap<String, RefOr<utoipa::openapi::Response>>> =
                        vec![$($($part::responses()),+)?];
                    parts.into_iter().fold(own, |mut answers, part| {
                        answers.extend(part);
                        answers
                    })
                }
            }
        )+
    };
}

problem_answers! {
    /// The admin API without a valid key.
    NoValidKey { 401 => "No valid key" };
    /// A write with a read-only key.
    ReadOnlyKey { 403 => "A read-only key" };
    /// A write to the admin API refused for its key.
    WriteRefused = [NoValidKey, ReadOnlyKey];
    /// A room that does not exist.
    RoomNotFound { 404 => "No such room" };
    /// A room or session that does not exist.
    RoomOrSessionNotFound { 404 => "No such room or session" };
    /// The store cannot be reached.
    StoreUnreachable { 503 => "The store cannot be reached" };
    /// A body that does not parse or holds values out of range.
    BadBody { 400 => "A bad body" };
    /// A query that does not parse.
    BadQuery { 400 => "A bad query" };
    /// A control of a room's mode through a conditional write (`conditional.rs`).
    ConditionalControl = [BadIfMatch, WriteRefused, RoomNotFound, RoomKeptChanging, VersionMismatch];
    /// An `If-Match` that is not an entity tag.
    BadIfMatch { 400 => "A malformed `If-Match`" };
    /// A write without `If-Match` that kept losing to other writes.
    RoomKeptChanging { 409 => "Without `If-Match`: the room kept changing; nothing changed, try again" };
    /// A write whose `If-Match` is not the room's version.
    VersionMismatch { 412 => "`If-Match` given and the room is not that version; nothing changed" };
    /// A room body with problems.
    BadRoomBody { 400 => "Every problem with the body (or a malformed `If-Match`); nothing changed" };
    /// `PUT` of a room whose `If-Match` is not its version.
    PutVersionMismatch { 412 => "`If-Match` given and the room is not that version (or does not exist); nothing changed" };
    /// `PATCH` without `If-Match` that kept losing to other writes.
    PatchKeptChanging { 409 => "Without `If-Match`: the room kept changing under the patch; nothing changed, try again" };
    /// A room that others still need.
    RoomInUse { 409 => "A route or another room still needs this one" };
    /// A pass by hand when every slot is taken.
    RoomFull { 409 => "Every slot is taken (max_active)" };
    /// A load signal that is not one.
    BadSignalBody { 400 => "A malformed or out-of-range body" };
    /// A load signal for a room without adaptive admission.
    NotAdaptive { 409 => "The room has no `[room.adaptive]`" };
    /// The store did not answer a key pruning.
    StoreDidNotAnswer { 503 => "The store did not answer" };
    /// The backend's session endpoints without a valid service key.
    NoValidServiceKey { 401 => "No valid service key" };
    /// A request that names a ticket without holding a good one.
    TicketUnusable { 400 => "No ticket, or one that does not verify" };
    /// A ticket request in a room that does not exist.
    HeldTicket = [TicketUnusable, RoomNotFound];
    /// A ticket that is no longer live.
    TicketGone { 410 => "The ticket expired, left or belongs to an older generation" };
    /// The refusals of a join.
    JoinProblems {
        400 => "A bad body, return path or identity",
        401 => "The room takes its identity from the site's token (`identity = \"jwt:<claim>\"`, `required = true`): none sent (`identity_required`), or one that does not verify, is expired or is for another issuer or audience (`identity_invalid`, the detail says which)",
        403 => "A priority access code that is wrong or used up (`invalid_priority_code`); or the room asks for a proof of work: none sent (`challenge_required`), a wrong, expired or forged one (`challenge_failed`), or one already used (`challenge_used`); `challenge_url` says where to get one; or the room `requires` another room's pass first (`pass_required`); or its identity header came from a peer outside `trusted_proxies` (`untrusted_proxy`)",
        404 => "No such room",
        413 => "The body is too large",
        429 => "Over the per-IP join limit (`rate_limited`, with the rate-limit headers), or too many joins with a priority code from this address (`code_attempts_exceeded`)",
        503 => "The room is closed, or the store cannot be reached, or this node cannot record more solved challenges right now (`challenge_unavailable`, with `Retry-After`), or the site's keys cannot be had to check its token (`identity_unavailable`, with `Retry-After`)",
    };
    /// The refusals of a challenge.
    ChallengeProblems {
        404 => "No such room, or the room asks for no proof of work (`challenge_not_used`)",
        503 => "The store cannot be reached",
    };
    /// The refusals of an event stream.
    EventStreamProblems {
        410 => "The ticket expired",
        429 => "The ticket, or the client address, has as many streams open as it may (`too_many_streams`, with `Retry-After`): poll instead",
        503 => "This node holds as many streams as it can: poll instead",
    };
    /// A node that should not get traffic now.
    NotReady { 503 => "Not ready (`not_ready`)" };
}

/// Declares texts the wire types hold as plain strings, for their schemas only:
/// `Name { "description", pattern, example }`. The types are never built: wire types name them
/// with `#[schema(value_type = …)]`.
macro_rules! text_schemas {
    ($($name:ident { $description:literal, pattern = $pattern:literal $(, example = $example:literal)? };)+) => {
        $(
            #[doc = $description]
            pub enum $name {}

            impl PartialSchema for $name {
                // `example` (not 3.1's `examples`), as utoipa's derive writes it for the other
                // wire types of the document.
                #[allow(deprecated)]
                fn schema() -> RefOr<Schema> {
                    let example: Option<&str> = None $(.or(Some($example)))?;
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .description(Some($description))
                        .example(example.map(Into::into))
                        .pattern(Some($pattern))
                        .into()
                }
            }

            impl ToSchema for $name {}
        )+
    };
}

text_schemas! {
    RoutePath { "A path glob a room protects, starting with `/`.", pattern = "^/", example = "/events/*/book/**" };
    RedirectUri {
        "An absolute http(s) URI without user information or fragment.",
        pattern = "^https?://[^/?#@\\s]+[^#\\s]*$",
        example = "https://app.example/oauth2/callback"
    };
    RoomIdText { "A room id.", pattern = "^[a-z0-9][a-z0-9-]{0,63}$", example = "tier1" };
    CodeDigest { "The SHA-256 digest of a priority access code.", pattern = "^sha256:[0-9a-fA-F]{64}$" };
}
