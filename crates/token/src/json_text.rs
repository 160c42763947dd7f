//! JSON string text written by hand, byte for byte as `serde_json` writes it. For the texts
//! made on every join, which skip serde's generic path but must read exactly as it would: a
//! pass's claims (`pass.rs`) and the node's status answers (the api crate's `status_json`).

/// Whether `byte` is written escaped: `"`, `\\` and the control characters, as `serde_json`
/// escapes them (and nothing else: not `/`, not DEL, not non-ASCII).
fn is_escaped(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// Whether any byte of `text` is escaped. Looks at every byte without stopping early, which
/// the compiler turns into a few wide comparisons (ids, tickets and passes never need one).
fn needs_escapes(text: &str) -> bool {
    text.bytes()
        .fold(false, |found, byte| found | is_escaped(byte))
}

/// How many bytes `byte` takes in a JSON string.
fn byte_len(byte: u8) -> usize {
    match byte {
        b'"' | b'\\' | 0x08 | 0x09 | 0x0a | 0x0c | 0x0d => 2,
        0x00..=0x1f => 6,
        _ => 1,
    }
}

/// How many bytes `text` takes between a JSON string's quotes.
pub fn escaped_len(text: &str) -> usize {
    if needs_escapes(text) {
        text.bytes().map(byte_len).sum()
    } else {
        text.len()
    }
}

/// Appends `text` as it reads between a JSON string's quotes (the quotes are the caller's):
/// `"` and `\\` with a backslash, control characters as `\b`, `\t`, `\n`, `\f`, `\r` or
/// `\u00XX`, everything else (other ASCII, and UTF-8 beyond it) as it is.
pub fn push_escaped(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = text.as_bytes();
    if !needs_escapes(text) {
        out.extend_from_slice(bytes);
        return;
    }
    let mut plain = 0;
    for (index, &byte) in bytes.iter().enumerate() {
        let short = match byte {
            b'"' => b'"',
            b'\\' => b'\\',
            0x08 => b'b',
            0x09 => b't',
            0x0a => b'n',
            0x0c => b'f',
            0x0d => b'r',
            0x00..=0x1f => b'u',
            _ => continue,
        };
        out.extend_from_slice(&bytes[plain..index]);
        if short == b'u' {
            out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xf)],
            ]);
        } else {
            out.extend_from_slice(&[b'\\', short]);
        }
        plain = index + 1;
    }
    out.extend_from_slice(&bytes[plain..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_reads_as_serde_json_writes_it() {
        let every_ascii: String = (0u8..=0x7f).map(char::from).collect();
        for text in [
            every_ascii.as_str(),
            "",
            "plain-id_0123",
            "\\",
            "\"\"",
            "\u{7f}\u{80}\u{2028}\u{10ffff}",
        ] {
            let expected = serde_json::to_vec(text).expect("serde_json writes a string");
            let mut written = vec![b'"'];
            push_escaped(&mut written, text);
            written.push(b'"');
            assert_eq!(
                String::from_utf8_lossy(&written),
                String::from_utf8_lossy(&expected)
            );
            assert_eq!(escaped_len(text) + 2, expected.len(), "{text:?}");
        }
    }
}
