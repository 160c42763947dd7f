//! The OpenAPI 3.1 document of the public API (§6.1) and the admin API (§8.1), generated from
//! the handlers' annotations and the wire types' schemas with utoipa, served at
//! `/admin/v1/openapi.json` and checked into `docs/openapi.json` (a test fails when the two
//! differ; `ANTEROOM_WRITE_OPENAPI=1 cargo test -p anteroom-admin --test openapi` rewrites it).
//!
//! Every handler carries its own `#[utoipa::path]`; this module assembles them. The problem
//! answers they name are declared once in `anteroom_api::problem_answers`.

use std::sync::LazyLock;

use anteroom_api::{page, sse};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use anteroom_api::error::{FieldError, Problem};
use anteroom_api::{api, challenge, readiness};

use crate::admin;

/// The document as pretty JSON, built once.
pub fn document_json() -> String {
    static DOCUMENT: LazyLock<String> =
        LazyLock::new(|| document_text(ApiDoc::openapi().to_pretty_json()));
    DOCUMENT.clone()
}

/// The serialized document and a newline, or, when it could not be serialized, a JSON object
/// naming the error. The message may hold quotes, backslashes or control characters, so it is
/// serialized as a JSON string, never pasted between quotes.
fn document_text(serialized: Result<String, impl std::fmt::Display>) -> String {
    let mut json = serialized
        .unwrap_or_else(|error| serde_json::json!({ "error": error.to_string() }).to_string());
    json.push('\n');
    json
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "anteroom",
        description = "A self-hosted virtual waiting room and rate-limiting gateway. The public \
            API lives on the public listener under /_anteroom/; the admin API on the admin \
            listener (default 127.0.0.1:9090) under /admin/v1, with `Authorization: Bearer \
            <admin key>`. Every error is application/problem+json with a stable `code`.",
        license(name = "Apache-2.0")
    ),
    paths(
        api::join, challenge::issue, api::status, sse::events, api::leave, api::leave_beacon,
        api::summary, api::complete_session, api::abandon_session, page::waiting_page,
        api::jwks, api::health, readiness::ready,
        admin::rooms::list, admin::rooms::get_room, admin::rooms::put_room,
        admin::rooms::patch_room, admin::rooms::delete_room,
        admin::control::pause, admin::control::resume, admin::control::close,
        admin::control::open, admin::control::advance, admin::control::reset,
        admin::control::issue_pass, admin::control::signal, admin::keys::rotate_keys,
        admin::keys::prune_keys, admin::stats::stats, admin::stats::sessions,
        admin::revoke::revoke_session, admin::events::feed,
    ),
    components(schemas(Problem, FieldError, api::JoinBody, admin::stats::SessionFilter)),
    modifiers(&SecuritySchemes),
    tags(
        (name = "public", description = "Visitors and the protected site (public listener)"),
        (name = "admin", description = "Operators (admin listener)"),
    )
)]
struct ApiDoc;

struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let bearer = |description: &str| {
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(description))
                    .build(),
            )
        };
        components.add_security_scheme(
            "admin_key",
            bearer("An admin key (read and write) or a read-only key from [auth]"),
        );
        components.add_security_scheme(
            "service_key",
            bearer("A backend service key from [auth] service_keys"),
        );
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_error_message_is_escaped_into_valid_json() {
        let message = "key \"a\\b\" at line 1\n\tcolumn 2";
        let text = document_text(Err::<String, _>(message));
        let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed["error"], message);
        assert_eq!(document_text(Ok::<_, String>("{}".to_owned())), "{}\n");
    }
}
