//! Fuzz target `chunked`: a chunked body decodes to the same bytes, ends in the same place and
//! fails the same way however the wire is split into reads. The first input byte chooses the
//! sizes of the pieces; the rest is the wire.
#![no_main]

use anteroom_h1::{ChunkedDecoder, Decoded};
use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;

/// How decoding the wire ended: the body and what was left after it, or where it stopped.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// The whole body, and the bytes after its end.
    Ended(Vec<u8>, Vec<u8>),
    /// The wire ended inside the body (what was decoded so far).
    Short(Vec<u8>),
    /// The coding was broken.
    Malformed,
}

/// Feeds `wire` to a decoder in pieces whose sizes cycle through `sizes`.
fn decode(wire: &[u8], sizes: &[usize]) -> Outcome {
    let mut decoder = ChunkedDecoder::default();
    let mut buffer = BytesMut::new();
    let mut body = Vec::new();
    let mut fed = 0;
    let mut piece = 0;
    loop {
        match decoder.next(&mut buffer) {
            Err(_) => return Outcome::Malformed,
            Ok(Decoded::Data(data)) => {
                assert!(!data.is_empty(), "an empty piece of data");
                body.extend_from_slice(&data);
            }
            Ok(Decoded::End) => {
                let mut rest = buffer.to_vec();
                rest.extend_from_slice(&wire[fed..]);
                return Outcome::Ended(body, rest);
            }
            Ok(Decoded::NeedMore) => {
                if fed == wire.len() {
                    return Outcome::Short(body);
                }
                let size = sizes[piece % sizes.len()].min(wire.len() - fed);
                piece += 1;
                buffer.extend_from_slice(&wire[fed..fed + size]);
                fed += size;
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&choice, wire)) = data.split_first() else {
        return;
    };
    let whole = decode(wire, &[wire.len().max(1)]);
    // Two piece sizes from 1 to 16 bytes, alternating.
    let sizes = [usize::from(choice & 0x0f) + 1, usize::from(choice >> 4) + 1];
    assert_eq!(decode(wire, &sizes), whole, "in pieces of {sizes:?}");
});
