//! Chunked transfer coding (RFC 9112 §7.1): writing chunks, and a decoder fed as bytes arrive.

use bytes::{Bytes, BytesMut};

/// Appends one chunk of a chunked body to `out`.
pub fn push_chunk(out: &mut Vec<u8>, data: &[u8]) {
    let mut size = [0u8; 16];
    let mut start = size.len();
    let mut rest = data.len();
    loop {
        start -= 1;
        size[start] = b"0123456789abcdef"[rest % 16];
        rest /= 16;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&size[start..]);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// A chunked body that does not follow the coding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the chunked body is malformed")]
pub struct MalformedChunk;

/// What the chunked decoder found in the buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// The next piece of the body.
    Data(Bytes),
    /// The last chunk and the trailers were read.
    End,
    /// The buffer holds no more of the body: read more into it.
    NeedMore,
}

/// A chunked body's decoder: chunk sizes with extensions ignored, trailers read and dropped.
/// The extensions of a body and its trailers are bounded ([`MAX_EXTENSION_BYTES`],
/// [`MAX_TRAILER_BYTES`], as hyper bounds them): without, a peer could send them for ever
/// (each line resets the reader's idle timer and no data is counted against a body limit).
#[derive(Debug, Default)]
pub struct ChunkedDecoder {
    state: ChunkState,
    /// Bytes of chunk extensions read so far (all of a size line but its size).
    extension_bytes: usize,
    /// Bytes of trailer lines read so far, their line ends included.
    trailer_bytes: usize,
}

#[derive(Debug, Default)]
enum ChunkState {
    /// At a chunk-size line.
    #[default]
    Size,
    /// Inside a chunk's data.
    Data(u64),
    /// After a chunk's data: its CRLF.
    DataEnd,
    /// After the last chunk: trailer lines until an empty one.
    Trailers,
}

/// The longest chunk-size line (size and extensions) or trailer line accepted.
const MAX_CHUNK_LINE: usize = 4096;

/// The most bytes of chunk extensions a body may carry in all.
const MAX_EXTENSION_BYTES: usize = 16 * 1024;

/// The most bytes of trailer lines a body may end with.
const MAX_TRAILER_BYTES: usize = 16 * 1024;

impl ChunkedDecoder {
    /// Takes what it can from the front of `buffer`: the next piece of data, the end of the
    /// body, or the need for more bytes. Bytes after the end stay in `buffer`.
    pub fn next(&mut self, buffer: &mut BytesMut) -> Result<Decoded, MalformedChunk> {
        loop {
            match &mut self.state {
                ChunkState::Size => {
                    let Some(line) = take_line(buffer)? else {
                        return Ok(Decoded::NeedMore);
                    };
                    let digits = line
                        .split(|byte| *byte == b';')
                        .next()
                        .unwrap_or_default()
                        .trim_ascii();
                    if digits.is_empty() || digits.len() > 15 {
                        return Err(MalformedChunk);
                    }
                    self.extension_bytes += line.len() - digits.len();
                    if self.extension_bytes > MAX_EXTENSION_BYTES {
                        return Err(MalformedChunk);
                    }
                    let mut size = 0u64;
                    for digit in digits {
                        let value = char::from(*digit).to_digit(16).ok_or(MalformedChunk)?;
                        size = size * 16 + u64::from(value);
                    }
                    self.state = if size == 0 {
                        ChunkState::Trailers
                    } else {
                        ChunkState::Data(size)
                    };
                }
                ChunkState::Data(remaining) => {
                    if buffer.is_empty() {
                        return Ok(Decoded::NeedMore);
                    }
                    let take = (*remaining).min(buffer.len() as u64);
                    *remaining -= take;
                    if *remaining == 0 {
                        self.state = ChunkState::DataEnd;
                    }
                    let take = usize::try_from(take).map_err(|_| MalformedChunk)?;
                    return Ok(Decoded::Data(buffer.split_to(take).freeze()));
                }
                ChunkState::DataEnd => {
                    if buffer.len() < 2 {
                        return Ok(Decoded::NeedMore);
                    }
                    if &buffer[..2] != b"\r\n" {
                        return Err(MalformedChunk);
                    }
                    let _ = buffer.split_to(2);
                    self.state = ChunkState::Size;
                }
                ChunkState::Trailers => {
                    let Some(line) = take_line(buffer)? else {
                        return Ok(Decoded::NeedMore);
                    };
                    if line.is_empty() {
                        return Ok(Decoded::End);
                    }
                    self.trailer_bytes += line.len() + 2;
                    if self.trailer_bytes > MAX_TRAILER_BYTES {
                        return Err(MalformedChunk);
                    }
                }
            }
        }
    }
}

/// The next CRLF-terminated line (without its CRLF), split off `buffer`. A line longer than
/// [`MAX_CHUNK_LINE`] is refused whether its end has arrived or not, so the outcome does not
/// depend on how the wire was split into reads.
fn take_line(buffer: &mut BytesMut) -> Result<Option<Bytes>, MalformedChunk> {
    match buffer.windows(2).position(|pair| pair == b"\r\n") {
        Some(end) if end > MAX_CHUNK_LINE => Err(MalformedChunk),
        Some(end) => {
            let line = buffer.split_to(end).freeze();
            let _ = buffer.split_to(2);
            Ok(Some(line))
        }
        // The line so far, and perhaps the CR of its end.
        None if buffer.len() > MAX_CHUNK_LINE + 1 => Err(MalformedChunk),
        None => Ok(None),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The body decoded from `wire` fed `piece` bytes at a time; `Ok(None)` when the wire
    /// ends before the body does.
    fn decode_in_pieces(wire: &[u8], piece: usize) -> Result<Option<Vec<u8>>, MalformedChunk> {
        let mut decoder = ChunkedDecoder::default();
        let mut buffer = BytesMut::new();
        let mut body = Vec::new();
        let mut pieces = wire.chunks(piece);
        loop {
            match decoder.next(&mut buffer)? {
                Decoded::Data(data) => body.extend_from_slice(&data),
                Decoded::End => return Ok(Some(body)),
                Decoded::NeedMore => match pieces.next() {
                    Some(more) => buffer.extend_from_slice(more),
                    None => return Ok(None),
                },
            }
        }
    }

    #[test]
    fn chunked_bodies_decode_however_they_are_split() {
        let wire =
            b"5;ext=1\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nx-trailer: 1\r\n\r\n";
        for piece in [1, 2, 3, 7, wire.len()] {
            assert_eq!(
                decode_in_pieces(wire, piece).unwrap().unwrap(),
                b"helloabcdefghijklmnopqrstuvwxyz",
                "pieces of {piece}"
            );
        }
        assert_eq!(decode_in_pieces(b"zz\r\n", 4), Err(MalformedChunk));
        assert_eq!(decode_in_pieces(b"2\r\nabX\r\n", 9), Err(MalformedChunk));
        assert_eq!(decode_in_pieces(b"2\r\nab\r\n", 9), Ok(None));
    }

    #[test]
    fn a_chunk_line_too_long_is_refused_however_it_arrives() {
        let mut wire = b"1;".to_vec();
        wire.resize(MAX_CHUNK_LINE + 1, b'x');
        wire.extend_from_slice(b"\r\na\r\n0\r\n\r\n");
        for piece in [1, 7, wire.len()] {
            assert_eq!(
                decode_in_pieces(&wire, piece),
                Err(MalformedChunk),
                "{piece}"
            );
        }
        let mut longest = b"1;".to_vec();
        longest.resize(MAX_CHUNK_LINE, b'x');
        longest.extend_from_slice(b"\r\na\r\n0\r\n\r\n");
        for piece in [1, 7, longest.len()] {
            assert_eq!(
                decode_in_pieces(&longest, piece),
                Ok(Some(b"a".to_vec())),
                "{piece}"
            );
        }
    }

    #[test]
    fn trailers_and_extensions_are_bounded_in_all() {
        // Trailer lines, each short, up to the bound in all: read; one more byte: refused.
        let trailers_of = |total: usize| {
            let mut wire = b"1\r\na\r\n0\r\n".to_vec();
            let mut left = total;
            while left > 0 {
                let line = left.min(1000);
                // `x: ` and the value, then CRLF: `line` bytes in all.
                let value = "v".repeat(line - 5);
                wire.extend_from_slice(format!("x: {value}\r\n").as_bytes());
                left -= line;
            }
            wire.extend_from_slice(b"\r\n");
            wire
        };
        for piece in [7, 4096] {
            assert_eq!(
                decode_in_pieces(&trailers_of(MAX_TRAILER_BYTES), piece),
                Ok(Some(b"a".to_vec()))
            );
            assert_eq!(
                decode_in_pieces(&trailers_of(MAX_TRAILER_BYTES + 1), piece),
                Err(MalformedChunk)
            );
        }
        // Extensions on chunks of one byte: 16 KiB of them in all, then no more.
        let extensions_of = |chunks: usize, each: usize| {
            let mut wire = Vec::new();
            for _ in 0..chunks {
                wire.extend_from_slice(format!("1;{}\r\na\r\n", "e".repeat(each - 1)).as_bytes());
            }
            wire.extend_from_slice(b"0\r\n\r\n");
            wire
        };
        assert_eq!(
            decode_in_pieces(&extensions_of(16, 1024), 512),
            Ok(Some(b"a".repeat(16)))
        );
        assert_eq!(
            decode_in_pieces(&extensions_of(17, 1024), 512),
            Err(MalformedChunk)
        );
    }

    #[test]
    fn chunks_are_written_with_hex_sizes() {
        let mut out = Vec::new();
        push_chunk(&mut out, b"data: x\n\n");
        assert_eq!(out, b"9\r\ndata: x\n\n\r\n");
        out.clear();
        push_chunk(&mut out, &[b'a'; 26]);
        assert_eq!(out[..4], *b"1a\r\n");
    }
}
