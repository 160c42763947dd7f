//! HTTP/1.1 message framing for anteroom's own HTTP engine, both ways: the request heads the
//! node's connection loop reads from visitors, the answer heads its upstream client reads from
//! the origin, how each message's body is delimited (RFC 9112 §6), chunked coding, and the
//! fields that concern one connection only (RFC 9110 §7.6.1).
//!
//! Everything here is pure: bytes in, parsed heads and decisions out, no sockets and no clock
//! (the `Date` value is the one exception: it reads the wall clock, as its definition says).
//! That keeps the rules in one place the server loop, the event-stream connection and the
//! upstream client all use, and lets the fuzz targets (`crates/h1/fuzz`) drive exactly the
//! code that faces the network.

mod answer;
mod bad_head;
mod chunked;
mod date;
mod fields;
mod request;
mod validity;

pub use answer::{
    AnswerFields, AnswerFraming, AnswerHead, BodyFraming, MalformedAnswer, PassedFields,
    parse_answer_head,
};
pub use bad_head::BadHead;
pub use chunked::{ChunkedDecoder, Decoded, MalformedChunk, push_chunk};
pub use date::append_now as append_date;
pub use fields::{
    connection_says, header_map, keeps_alive, only_chunked, parse_length, remove_hop_by_hop,
    request_states_length, span_in,
};
pub use request::{Framing, MAX_HEAD_BYTES, MAX_HEADERS, MAX_INLINE_BODY, RequestHead, take_head};
pub use validity::{check_request, has_one_host};
