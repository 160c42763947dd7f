//! Fuzz target `answer_head`: [`parse_answer_head`] and [`AnswerHead::body_framing`] on
//! whatever an origin might send never panic; no field of the origin's connection stays in
//! the head (`Connection`, `Transfer-Encoding`, `Keep-Alive`, ...), and a `Content-Length`
//! stays only when it frames the body (the visitor's connection must not be framed by a
//! length a coding overrides); a head is split off the front of the input and the body's
//! bytes are left.
#![no_main]

use anteroom_h1::{BodyFraming, parse_answer_head};
use bytes::BytesMut;
use http::header::{CONNECTION, CONTENT_LENGTH, TE, TRAILER, TRANSFER_ENCODING, UPGRADE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut buffer = BytesMut::from(data);
    let Ok(Some(head)) = parse_answer_head(&mut buffer, 2) else {
        return;
    };
    assert!(data.ends_with(&buffer[..]), "the rest was not left whole");
    for name in [CONNECTION, TRANSFER_ENCODING, TE, TRAILER, UPGRADE] {
        assert!(!head.headers.contains_key(name));
    }
    assert!(!head.headers.contains_key("keep-alive"));
    if head.headers.contains_key(CONTENT_LENGTH) {
        assert!(matches!(head.framing, BodyFraming::Length(_)));
    }
    for request_was_head in [false, true] {
        let framing = head.body_framing(request_was_head);
        let bodiless = request_was_head
            || head.status.is_informational()
            || head.status.as_u16() == 204
            || head.status.as_u16() == 304;
        if bodiless {
            assert_eq!(framing, BodyFraming::Length(0));
        } else {
            assert_eq!(framing, head.framing);
        }
    }
});
