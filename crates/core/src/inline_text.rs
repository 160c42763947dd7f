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

    /// The text's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.held {
            Held::Inline { bytes, len } => &bytes[..*len],
            Held::Heap(text) => text.as_bytes(),
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

    /// The text's length in bytes.
    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    /// Whether the text is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends the bytes `range` of the text itself again (a range of lengths the text had
    /// after whole writes, so at char boundaries); nothing when it is not such a range.
    pub fn extend_from_within(&mut self, range: std::ops::Range<usize>) {
        if self.as_str().get(range.clone()).is_none() {
            return;
        }
        match &mut self.held {
            Held::Inline { bytes, len } => {
                let end = *len + range.len();
                if end <= N {
                    bytes.copy_within(range, *len);
                    *len = end;
                    return;
                }
                let mut spilled = String::with_capacity(end.max(2 * N));
                spilled.push_str(std::str::from_utf8(&bytes[..*len]).unwrap_or_default());
                spilled.extend_from_within(range);
                self.held = Held::Heap(spilled);
            }
            Held::Heap(held) => held.extend_from_within(range),
        }
    }

    /// Appends `text`.
    pub fn push_str(&mut self, text: &str) {
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

impl<const N: usize> From<&str> for InlineText<N> {
    fn from(text: &str) -> InlineText<N> {
        let mut inline = InlineText::new();
        inline.push_str(text);
        inline
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
                    let at = string.len() / 2;
                    if string.is_char_boundary(at) {
                        inline.extend_from_within(0..at);
                        string.extend_from_within(0..at);
                    }
                    assert_eq!(inline.as_str(), string);
                    assert_eq!(inline.as_bytes(), string.as_bytes());
                    assert_eq!(inline.len(), string.len());
                    assert_eq!(inline.is_empty(), string.is_empty());
                    let spilled = matches!(inline.held, Held::Heap(_));
                    assert_eq!(spilled, string.len() > 12, "{string:?}");
                }
            }
        }
    }

    #[test]
    fn a_range_outside_the_text_appends_nothing() {
        let mut text = InlineText::<8>::from("abc");
        text.extend_from_within(2..9);
        text.extend_from_within(0..1);
        assert_eq!(text.as_str(), "abca");
        let mut text = InlineText::<8>::from("é");
        text.extend_from_within(0..1);
        assert_eq!(text.as_str(), "é");
    }
}
