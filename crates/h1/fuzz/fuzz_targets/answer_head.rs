//! Fuzz target `answer_head`: [`parse_answer_head`] and [`AnswerHead::body_framing`] on
//! whatever an origin might send never panic; a head with `Transfer-Encoding` never keeps a
//! `Content-Length` (the visitor's connection must not be framed by a length the coding
//! overrides); a head is split off the front of the input and the body's bytes are left.
#![no_main]

use anteroom_h1::{BodyFraming, parse_answer_head};
use bytes::BytesMut;
use http::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut buffer = BytesMut::from(data);
    let Ok(Some(head)) = parse_answer_head(&mut buffer, 2) else {
        return;
    };
    assert!(data.ends_with(&buffer[..]), "the rest was not left whole");
    if head.headers.contains_key(TRANSFER_ENCODING) {
        assert!(!head.headers.contains_key(CONTENT_LENGTH));
        assert!(!matches!(head.framing, BodyFraming::Length(_)));
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
