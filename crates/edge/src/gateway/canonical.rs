//! The first step (SPEC §14.3): the request's path in the one spelling that routes match and
//! the upstream receives ([`anteroom_core::request_path`]), or 400 `ambiguous_path` when
//! servers would read it differently. The verify endpoint checks the URI a proxy names the
//! same way. An already canonical path costs one scan and no allocation; the query is kept as
//! it came.

use std::borrow::Cow;

use axum::body::Bytes;
use axum::http::Uri;
use axum::http::uri::PathAndQuery;

use anteroom_core::request_path::{AmbiguousPath, canonical_path};

use anteroom_api::error::ApiError;

/// Puts the request's path in canonical form, or says why it is refused (400
/// `ambiguous_path`).
pub(crate) fn canonicalize(uri: &mut Uri) -> Result<(), ApiError> {
    if let Some(canonical) = canonical_uri(uri)? {
        *uri = canonical;
    }
    Ok(())
}

/// `uri` with its path in canonical form: `None` when it already is.
pub(crate) fn canonical_uri(uri: &Uri) -> Result<Option<Uri>, ApiError> {
    let mut target = match canonical_path(uri.path()) {
        Ok(Cow::Borrowed(_)) => return Ok(None),
        Ok(Cow::Owned(path)) => path,
        Err(reason) => return Err(ambiguous(reason)),
    };
    if let Some(query) = uri.query() {
        target.push('?');
        target.push_str(query);
    }
    let mut parts = uri.clone().into_parts();
    // The canonical path holds only characters a URI allows: this cannot fail.
    let path_and_query = PathAndQuery::from_maybe_shared(Bytes::from(target))
        .map_err(|_| ambiguous(AmbiguousPath::InvalidCharacter))?;
    parts.path_and_query = Some(path_and_query);
    Uri::from_parts(parts)
        .map(Some)
        .map_err(|_| ambiguous(AmbiguousPath::InvalidCharacter))
}

fn ambiguous(reason: AmbiguousPath) -> ApiError {
    ApiError::bad_request(
        "ambiguous_path",
        format!("{reason}: servers read such a path differently, so it is refused"),
    )
}
