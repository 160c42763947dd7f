//! Fuzz target `request_head`: [`take_head`] on whatever a visitor might send never panics,
//! and a head it returns is exactly the front of the input: its bytes are a prefix of what
//! came, and what follows (the body, or the next request) is left in the buffer untouched.
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
});
