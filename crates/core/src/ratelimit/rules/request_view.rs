//! [`RequestView`]: what a rate-limit rule reads of a request, whatever the request is.

use std::net::IpAddr;

/// What a rule needs to know about a request. The HTTP layer implements it over a real
/// request; tests implement it over plain data.
pub trait RequestView {
    /// The method, as sent (`GET`, `POST`, …).
    fn method(&self) -> &str;
    /// The host the request was sent to, normalised with [`normalize_host`](super::normalize_host); `None` if absent.
    fn host(&self) -> Option<&str>;
    /// The path, normalised with [`normalize_path`](super::normalize_path).
    fn path(&self) -> &str;
    /// The first value of header `name` (given in lower case), if present.
    fn header(&self, name: &str) -> Option<&str>;
    /// The value of cookie `name`, if present.
    fn cookie(&self, name: &str) -> Option<&str>;
    /// The value of claim `name` of the request's verified token (the anteroom pass or the
    /// site's own token), if the caller verified one.
    fn claim(&self, name: &str) -> Option<&str>;
    /// The client's address (see [`client_ip`](crate::ratelimit::client_ip)).
    fn client_ip(&self) -> IpAddr;
}
