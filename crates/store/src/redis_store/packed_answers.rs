//! A batch's answers as `join.lua`, `status.lua` and `session.lua` send them: one MessagePack
//! string (Lua's `cmsgpack.pack`) holding an array of answers, each an array of text fields,
//! or one array of text fields for the whole batch (a refusal). Read here instead of by the
//! Redis client: parsing ten replies a join took the client about 16,000 instructions a join.
//!
//! Only what `cmsgpack` writes for arrays of Lua strings is read (fixarray, array 16/32,
//! fixstr, str 8/16/32); anything else, a length past the end, text that is not UTF-8, bytes
//! after the value, or a shared answer that is not a refusal is an error: a malformed reply
//! never becomes an answer.

use super::records::{Answer, MalformedAnswer};
use super::room_call::{Outcome, RoomCaller, malformed};
use super::scripts::RoomFunction;
use crate::StoreError;

/// What a batched call answered.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PackedAnswers {
    /// One answer per request, in order, each its text fields.
    PerRequest(Vec<Vec<String>>),
    /// One refusal (`error` and why) for every request of the batch (the room is missing or
    /// closed).
    Shared(Vec<String>),
}

/// The most fields one answer has (a waiting answer has ten): a longer one is malformed.
const MAX_FIELDS: usize = 16;

/// Reads `bytes`, which must hold exactly one value.
pub(crate) fn decode(bytes: &[u8]) -> Result<PackedAnswers, MalformedAnswer> {
    let mut reader = Reader { bytes, at: 0 };
    let outer = reader.array()?;
    if outer == 0 {
        return Err(MalformedAnswer("an empty batch answer".to_owned()));
    }
    let answers = if reader.next_is_array()? {
        let mut answers = Vec::with_capacity(outer);
        for _ in 0..outer {
            let fields = reader.array()?;
            answers.push(reader.fields(fields)?);
        }
        PackedAnswers::PerRequest(answers)
    } else {
        let fields = reader.fields(outer)?;
        // Only a refusal is shared: an answer given to every join would hand one ticket out
        // many times (and every status would be another's).
        if fields.first().map(String::as_str) != Some("error") {
            return Err(MalformedAnswer(
                "an answer shared by the batch that is not a refusal".to_owned(),
            ));
        }
        PackedAnswers::Shared(fields)
    };
    if reader.at != bytes.len() {
        return Err(MalformedAnswer(format!(
            "{} bytes after the batch answer",
            bytes.len() - reader.at
        )));
    }
    Ok(answers)
}

/// Makes a batched call of `function` (`join`, `status`, `session`: the functions that answer
/// as one MessagePack string) for `count` requests through [`RoomCaller::batched`], and reads
/// its reply with [`outcomes`].
pub(super) async fn call(
    sender: &RoomCaller,
    function: RoomFunction,
    args: Vec<String>,
    count: usize,
) -> Vec<Outcome> {
    sender
        .batched(function, args, count, |packed: Vec<u8>, count| {
            outcomes(function.name(), &packed, count)
        })
        .await
}

/// Reads the reply of a batched call of `function` (`join`, `status`, `session`): one outcome
/// per request, or one refusal for the whole batch (the room is missing or closed) given to
/// every request. A reply with another count of answers is malformed.
pub(super) fn outcomes(
    function: &str,
    packed: &[u8],
    count: usize,
) -> Result<Vec<Outcome>, StoreError> {
    let answers = match decode(packed).map_err(|error| malformed(function, error))? {
        PackedAnswers::Shared(fields) => {
            return Ok((0..count)
                .map(|_| Answer::new(fields.clone()).map_err(|error| malformed(function, error)))
                .collect());
        }
        PackedAnswers::PerRequest(answers) => answers,
    };
    if answers.len() != count {
        return Err(malformed(
            function,
            MalformedAnswer(format!("{} answers for {count} requests", answers.len())),
        ));
    }
    Ok(answers
        .into_iter()
        .map(|fields| one_outcome(function, fields))
        .collect())
}

/// One request's answer: its status or refusal, or the error it alone failed with (`failed`).
fn one_outcome(function: &str, fields: Vec<String>) -> Outcome {
    if let [word, why] = fields.as_slice()
        && word == "failed"
    {
        return Err(StoreError::Backend {
            message: format!("redis function {function} failed for this request: {why}"),
            source: None,
        });
    }
    Answer::new(fields).map_err(|error| malformed(function, error))
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, MalformedAnswer> {
        let byte = *self
            .bytes
            .get(self.at)
            .ok_or_else(|| MalformedAnswer("the batch answer ends early".to_owned()))?;
        self.at += 1;
        Ok(byte)
    }

    /// The next `n` bytes.
    fn take(&mut self, n: usize) -> Result<&[u8], MalformedAnswer> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| MalformedAnswer("the batch answer ends early".to_owned()))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    /// A big-endian length of `width` bytes (1, 2 or 4).
    fn length(&mut self, width: usize) -> Result<usize, MalformedAnswer> {
        let mut length = 0usize;
        for &byte in self.take(width)? {
            length = (length << 8) | usize::from(byte);
        }
        Ok(length)
    }

    fn next_is_array(&self) -> Result<bool, MalformedAnswer> {
        match self.bytes.get(self.at) {
            Some(&marker) => Ok(matches!(marker, 0x90..=0x9f | 0xdc | 0xdd)),
            None => Err(MalformedAnswer("the batch answer ends early".to_owned())),
        }
    }

    /// An array's length; each element takes at least a byte, so a length longer than what is
    /// left is refused before anything is allocated for it.
    fn array(&mut self) -> Result<usize, MalformedAnswer> {
        let length = match self.byte()? {
            marker @ 0x90..=0x9f => usize::from(marker & 0x0f),
            0xdc => self.length(2)?,
            0xdd => self.length(4)?,
            other => {
                return Err(MalformedAnswer(format!(
                    "expected an array in the batch answer, found marker {other:#04x}"
                )));
            }
        };
        if length > self.bytes.len() - self.at {
            return Err(MalformedAnswer("the batch answer ends early".to_owned()));
        }
        Ok(length)
    }

    fn text(&mut self) -> Result<String, MalformedAnswer> {
        let length = match self.byte()? {
            marker @ 0xa0..=0xbf => usize::from(marker & 0x1f),
            0xd9 => self.length(1)?,
            0xda => self.length(2)?,
            0xdb => self.length(4)?,
            other => {
                return Err(MalformedAnswer(format!(
                    "expected text in the batch answer, found marker {other:#04x}"
                )));
            }
        };
        let bytes = self.take(length)?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| MalformedAnswer("text in the batch answer is not UTF-8".to_owned()))
    }

    /// An answer of `count` text fields (at least one, at most [`MAX_FIELDS`]).
    fn fields(&mut self, count: usize) -> Result<Vec<String>, MalformedAnswer> {
        if count == 0 || count > MAX_FIELDS {
            return Err(MalformedAnswer(format!("an answer of {count} fields")));
        }
        (0..count).map(|_| self.text()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MessagePack of an array of arrays of texts, as `cmsgpack.pack` writes it.
    fn pack(answers: &[&[&str]]) -> Vec<u8> {
        let mut bytes = vec![0x90 | u8::try_from(answers.len()).expect("few")];
        for fields in answers {
            bytes.push(0x90 | u8::try_from(fields.len()).expect("few"));
            for field in *fields {
                bytes.extend(pack_text(field));
            }
        }
        bytes
    }

    fn pack_text(text: &str) -> Vec<u8> {
        let length = text.len();
        let mut bytes = if length < 32 {
            vec![0xa0 | u8::try_from(length).expect("short")]
        } else if let Ok(short) = u8::try_from(length) {
            vec![0xd9, short]
        } else {
            let mut header = vec![0xda];
            header.extend(u16::try_from(length).expect("short").to_be_bytes());
            header
        };
        bytes.extend(text.as_bytes());
        bytes
    }

    fn owned(fields: &[&str]) -> Vec<String> {
        fields.iter().map(|field| (*field).to_owned()).collect()
    }

    #[test]
    fn answers_per_request_and_shared_answers_are_read() {
        let (record, long) = ("w".repeat(40), "x".repeat(300));
        let bytes = pack(&[&["waiting", &record, &long], &["error", "join_cancelled"]]);
        assert_eq!(
            decode(&bytes).expect("well formed"),
            PackedAnswers::PerRequest(vec![
                owned(&["waiting", &record, &long]),
                owned(&["error", "join_cancelled"])
            ])
        );
        let mut shared = vec![0x92];
        shared.extend(pack_text("error"));
        shared.extend(pack_text("room_closed"));
        assert_eq!(
            decode(&shared).expect("well formed"),
            PackedAnswers::Shared(owned(&["error", "room_closed"]))
        );
    }

    #[test]
    fn every_truncation_of_an_answer_is_refused() {
        let bytes = pack(&[&["waiting", "t1", "rec"], &["admitted", "t2"]]);
        for end in 0..bytes.len() {
            assert!(decode(&bytes[..end]).is_err(), "cut at {end} was read");
        }
        assert!(decode(&bytes).is_ok());
    }

    #[test]
    fn malformed_answers_are_refused() {
        let good = pack(&[&["waiting", "t1"]]);
        // Bytes after the value.
        let mut trailing = good.clone();
        trailing.push(0xa0);
        assert!(decode(&trailing).is_err());
        // A length that claims more than is there, at every width.
        assert!(decode(&[0x91, 0x91, 0xdb, 0xff, 0xff, 0xff, 0xff, b'a']).is_err());
        assert!(decode(&[0xdd, 0xff, 0xff, 0xff, 0xff, 0x91]).is_err());
        assert!(decode(&[0xdc, 0x00, 0x02, 0x91, 0xa1, b'a']).is_err());
        // A number, a map or nil where text or an array belongs.
        assert!(decode(&[0x91, 0x91, 0x05]).is_err());
        assert!(decode(&[0x81, 0xa1, b'a', 0xa1, b'b']).is_err());
        assert!(decode(&[0x91, 0xc0]).is_err());
        // Answers of no fields, too many fields, or none at all.
        assert!(decode(&[0x91, 0x90]).is_err());
        assert!(decode(&[0x90]).is_err());
        let many: Vec<&str> = vec!["a"; MAX_FIELDS + 1];
        assert!(decode(&pack(&[&many])).is_err());
        // Text that is not UTF-8.
        assert!(decode(&[0x91, 0x91, 0xa2, 0xff, 0xfe]).is_err());
        // A join's answer mixed into a shared one, and a shared answer that is not a refusal.
        assert!(decode(&[0x92, 0xa1, b'a', 0x91, 0xa1, b'b']).is_err());
        let mut shared = vec![0x92];
        shared.extend(pack_text("waiting"));
        shared.extend(pack_text("t1"));
        assert!(decode(&shared).is_err());
        // Binary (bin 8) where text belongs: cmsgpack writes strings as str.
        assert!(decode(&[0x91, 0x91, 0xc4, 0x01, b'a']).is_err());
    }
}
