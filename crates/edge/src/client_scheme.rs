//! How the visitor reached the node (plain HTTP or TLS): set by the HTTP engine on each
//! request, read by the gateway for the origin's forwarding fields.

/// How the visitor reached the node: a request extension the engine sets on requests that
/// came over TLS, so the gateway tells the origin `proto=https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientScheme {
    /// Plain HTTP.
    Http,
    /// HTTP over TLS on this node's listener.
    Https,
}

impl ClientScheme {
    /// The scheme of a request with `extensions` (plain unless the engine marked it).
    pub(crate) fn of(extensions: &axum::http::Extensions) -> ClientScheme {
        extensions
            .get::<ClientScheme>()
            .copied()
            .unwrap_or(ClientScheme::Http)
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ClientScheme::Http => "http",
            ClientScheme::Https => "https",
        }
    }
}
