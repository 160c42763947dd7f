//! Fuzz target `request_head`: [`take_head`] on whatever a visitor might send never panics,
//! and a head it returns is exactly the front of the input: its bytes are a prefix of what
//! came, and what follows (the body, or the next request) is left in the buffer untouched;
//! its header map holds exactly the fields of the head, each name's values in the order they
//! came (however many fields: those noted on the stack while parsing, and those past it).
#![no_main]

use anteroom_h1::take_head;
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut buffer = BytesMut::from(data);
    let Ok(Some(head)) = take_head(&mut buffer) else {
        return;
    };
    let raw = &head.raw[..];
    assert!(
        data.starts_with(raw),
        "the head is not the front of the input"
    );
    assert_eq!(
        &buffer[..],
        &data[raw.len()..],
        "the rest was not left whole"
    );
    assert!(raw.ends_with(b"\n"), "a head ends with its empty line");
    let mut fields = [httparse::EMPTY_HEADER; anteroom_h1::MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut fields);
    assert!(
        matches!(parsed.parse(raw), Ok(httparse::Status::Complete(length)) if length == raw.len()),
        "the head does not parse again to its length"
    );
    let headers = head.request.headers();
    assert_eq!(headers.len(), parsed.headers.len(), "fields lost or added");
    for field in parsed.headers.iter() {
        let sent: Vec<&[u8]> = parsed
            .headers
            .iter()
            .filter(|other| other.name.eq_ignore_ascii_case(field.name))
            .map(|other| other.value)
            .collect();
        let held: Vec<&[u8]> = headers
            .get_all(field.name)
            .iter()
            .map(|value| value.as_bytes())
            .collect();
        assert_eq!(held, sent, "the values of {:?}", field.name);
    }
});
