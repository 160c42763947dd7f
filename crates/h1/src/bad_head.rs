//! Why a request head was not served, and the answer each refusal sends: what the parser
//! (`request`) and the checks of what parses but is ambiguous (`validity`) both return.

/// Why a request head was not served.
#[derive(Debug, PartialEq, Eq)]
pub enum BadHead {
    /// The client closed the connection (or it broke) before the head was complete.
    Closed,
    /// Not an HTTP/1.x request head: 400, as hyper answers.
    Malformed,
    /// More than [`MAX_HEAD_BYTES`](crate::MAX_HEAD_BYTES) or
    /// [`MAX_HEADERS`](crate::MAX_HEADERS): 431, as hyper answers.
    TooLarge,
    /// An HTTP/1.1 request without a `Host`, or any request with several
    /// ([`has_one_host`](crate::has_one_host)).
    Host,
    /// Framing fields that could be read more than one way ([`check_request`](crate::check_request)).
    Framing,
}

/// The problem+json body of a request refused for its `Host` (both engines answer it).
macro_rules! host_problem {
    () => {
        r#"{"type":"about:blank","title":"Bad Request","status":400,"code":"invalid_host","detail":"an HTTP/1.1 request must carry exactly one Host header"}"#
    };
}

/// The problem+json body of a request refused for its framing fields (both engines answer it).
macro_rules! framing_problem {
    () => {
        r#"{"type":"about:blank","title":"Bad Request","status":400,"code":"invalid_framing","detail":"the request's Content-Length and Transfer-Encoding must say one thing: one length, or chunked alone"}"#
    };
}

/// A 400 answer with a problem+json body, closing the connection.
macro_rules! problem_answer {
    ($length:literal, $body:expr) => {
        concat!(
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/problem+json\r\n",
            "content-length: ",
            $length,
            "\r\nconnection: close\r\n\r\n",
            $body
        )
        .as_bytes()
    };
}

impl BadHead {
    /// The problem+json body of [`BadHead::Host`], for an engine that writes its own answer.
    pub const HOST_PROBLEM: &'static str = host_problem!();

    /// The problem+json body of [`BadHead::Framing`], for an engine that writes its own answer.
    pub const FRAMING_PROBLEM: &'static str = framing_problem!();

    /// The problem+json body of a refusal hyper's service writes itself ([`BadHead::Host`],
    /// [`BadHead::Framing`]); `None` for what only the parser finds.
    pub fn problem(&self) -> Option<&'static str> {
        match self {
            BadHead::Host => Some(Self::HOST_PROBLEM),
            BadHead::Framing => Some(Self::FRAMING_PROBLEM),
            BadHead::Closed | BadHead::Malformed | BadHead::TooLarge => None,
        }
    }

    /// The whole answer sent before closing the connection, if any.
    pub fn answer(&self) -> Option<&'static [u8]> {
        match self {
            BadHead::Closed => None,
            BadHead::Malformed => {
                Some(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            }
            BadHead::TooLarge => Some(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            ),
            BadHead::Host => Some(problem_answer!("145", host_problem!())),
            BadHead::Framing => Some(problem_answer!("193", framing_problem!())),
        }
    }
}
