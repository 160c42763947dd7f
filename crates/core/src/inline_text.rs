//! Text built on the stack up to a size, on the heap beyond it: for the short texts made for
//! every request (the lone rate limit's counter key), which a `String` would allocate and
//! free again each time.

use std::fmt;

/// Text of up to `N` bytes held inline; longer text moves to a `String` (once, whole), so a
/// long client address or host is still taken whole. Written through [`fmt::Write`], so it
/// only ever holds UTF-8.
#[derive(Clone)]
pub struct InlineText<const N: usize> {
    held: Held<N>,
}

#[derive(Clone)]
enum Held<const N: usize> {
    Inline { bytes: [u8; N], len: usize },
    Heap(String),
}

impl<const N: usize> InlineText<N> {
    /// Empty text.
    pub const fn new() -> InlineText<N> {
        InlineText {
            held: Held::Inline {
                bytes: [0; N],
                len: 0,
            },
        }
    }

    /// The text. Only `&str` and `char` are ever written into it, in whole, so its bytes are
    /// UTF-8; were they not, the empty text is answered rather than a panic.
    pub fn as_str(&self) -> &str {
        match &self.held {
            Held::Inline { bytes, len } => std::str::from_utf8(&bytes[..*len]).unwrap_or_default(),
            Held::Heap(text) => text,
        }
    }

    /// Appends `text`.
    fn push_str(&mut self, text: &str) {
        match &mut self.held {
            Held::Inline { bytes, len } => {
                let end = *len + text.len();
                if let Some(room) = bytes.get_mut(*len..end) {
                    room.copy_from_slice(text.as_bytes());
                    *len = end;
                    return;
                }
                let mut spilled = String::with_capacity(end.max(2 * N));
                spilled.push_str(std::str::from_utf8(&bytes[..*len]).unwrap_or_default());
                spilled.push_str(text);
                self.held = Held::Heap(spilled);
            }
            Held::Heap(held) => held.push_str(text),
        }
    }
}

impl<const N: usize> Default for InlineText<N> {
    fn default() -> InlineText<N> {
        InlineText::new()
    }
}

impl<const N: usize> fmt::Write for InlineText<N> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        self.push_str(text);
        Ok(())
    }
}

impl<const N: usize> fmt::Debug for InlineText<N> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), formatter)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::fmt::Write as _;

    use super::*;

    /// Any sequence of writes leaves the text a `String` would hold, inline while it fits and
    /// on the heap once it does not, multi-byte characters included at the boundary.
    #[test]
    fn writes_hold_what_a_string_holds_on_either_side_of_the_inline_room() {
        let pieces = [
            "",
            "a",
            "é",
            "for=",
            "203.0.113.7",
            "ünïcødé",
            "0123456789abcdef",
        ];
        for first in pieces {
            for second in pieces {
                for third in pieces {
                    let mut inline = InlineText::<12>::new();
                    let mut string = String::new();
                    for piece in [first, second, third] {
                        inline.push_str(piece);
                        write!(inline, "{piece}|").unwrap();
                        string.push_str(piece);
                        write!(string, "{piece}|").unwrap();
                    }
                    assert_eq!(inline.as_str(), string);
                    let spilled = matches!(inline.held, Held::Heap(_));
                    assert_eq!(spilled, string.len() > 12, "{string:?}");
                }
            }
        }
    }
}
