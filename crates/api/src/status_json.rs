//! The status answer of SPEC §6.1: its wire types ([`StatusBody`]: the status JSON is shaped
//! exactly as §6.1 shows it), and its text written by hand for the HTTP answers of join and
//! status.
//!
//! Every join and every status poll writes one, so it is written straight into a buffer of
//! exactly its size (measured in a first pass over the same code), the shape that the
//! body needs to become a response without another allocation. The bytes are the ones
//! `serde_json` writes for [`StatusBody`] (same fields, order, escapes and `null`s; the
//! tests hold the two together), which stays the schema and the form of the SSE events.

use serde::Serialize;

use anteroom_core::eta::EtaBasis;
use anteroom_token::json_text;

/// Status JSON (join, status, and later the SSE `status` event).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct StatusBody {
    pub(crate) room: String,
    #[schema(inline)]
    pub(crate) state: TicketState,
    pub(crate) ticket: String,
    pub(crate) position: u64,
    /// Live tickets ahead; `null` in a scheduled pre-queue (`state` = `prequeue`), whose
    /// order is only drawn at `opens_at` (SPEC §5.3).
    pub(crate) ahead: Option<u64>,
    pub(crate) serving: u64,
    pub(crate) waiting: u64,
    pub(crate) eta_seconds: Option<u64>,
    /// What `eta_seconds` rests on: the measured admission rate, or the room's configured pace
    /// before anything has been measured; `null` with no estimate.
    #[schema(inline)]
    pub(crate) eta_basis: Option<EtaBasisName>,
    pub(crate) next_poll_ms: u64,
    /// When a scheduled pre-queue opens (RFC 3339); only with `state` = `prequeue`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) opens_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) pass: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) pass_expires_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) redirect: Option<String>,
}

/// Where a ticket stands: the status JSON's `state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum TicketState {
    /// In line, admissions running.
    Waiting,
    /// In line, admissions paused (mode `queue_all`).
    Paused,
    /// In a scheduled pre-queue, before the draw (SPEC §5.3).
    Prequeue,
    /// Admitted: the pass is in the answer.
    Admitted,
}

impl TicketState {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TicketState::Waiting => "waiting",
            TicketState::Paused => "paused",
            TicketState::Prequeue => "prequeue",
            TicketState::Admitted => "admitted",
        }
    }
}

/// `eta_basis` on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum EtaBasisName {
    /// From the measured admission rate (SPEC §5.5).
    Measured,
    /// From the room's `admit_per_minute` and `max_active` / `session_ttl`.
    Configured,
}

impl EtaBasisName {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EtaBasisName::Measured => "measured",
            EtaBasisName::Configured => "configured",
        }
    }
}

impl From<EtaBasis> for EtaBasisName {
    fn from(basis: EtaBasis) -> Self {
        match basis {
            EtaBasis::Measured => EtaBasisName::Measured,
            EtaBasis::Configured => EtaBasisName::Configured,
        }
    }
}

/// The answer's JSON text, in a buffer whose capacity is its length.
pub(crate) fn encode(body: &StatusBody) -> Vec<u8> {
    let mut length = Length(0);
    write(&mut length, body);
    let mut out = Text(Vec::with_capacity(length.0));
    write(&mut out, body);
    out.0
}

/// Where the text goes: measured first, then written.
trait Sink {
    /// Bytes taken as they are.
    fn put(&mut self, bytes: &[u8]);
    /// A number in decimal.
    fn number(&mut self, value: u64);
    /// A JSON string, quoted and escaped.
    fn string(&mut self, text: &str);
}

/// Counts the bytes the text will take.
struct Length(usize);

impl Sink for Length {
    fn put(&mut self, bytes: &[u8]) {
        self.0 += bytes.len();
    }

    fn number(&mut self, value: u64) {
        self.0 += value
            .checked_ilog10()
            .map_or(1, |digits| digits as usize + 1);
    }

    fn string(&mut self, text: &str) {
        self.0 += 2 + json_text::escaped_len(text);
    }
}

/// Writes the text.
struct Text(Vec<u8>);

impl Sink for Text {
    fn put(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }

    fn number(&mut self, value: u64) {
        self.put(itoa::Buffer::new().format(value).as_bytes());
    }

    fn string(&mut self, text: &str) {
        self.put(b"\"");
        json_text::push_escaped(&mut self.0, text);
        self.put(b"\"");
    }
}

fn write(out: &mut impl Sink, body: &StatusBody) {
    out.put(b"{\"room\":");
    out.string(&body.room);
    out.put(b",\"state\":");
    out.string(body.state.as_str());
    out.put(b",\"ticket\":");
    out.string(&body.ticket);
    out.put(b",\"position\":");
    out.number(body.position);
    out.put(b",\"ahead\":");
    optional_number(out, body.ahead);
    out.put(b",\"serving\":");
    out.number(body.serving);
    out.put(b",\"waiting\":");
    out.number(body.waiting);
    out.put(b",\"eta_seconds\":");
    optional_number(out, body.eta_seconds);
    out.put(b",\"eta_basis\":");
    match body.eta_basis {
        Some(basis) => out.string(basis.as_str()),
        None => out.put(b"null"),
    }
    out.put(b",\"next_poll_ms\":");
    out.number(body.next_poll_ms);
    // Absent rather than null, as `skip_serializing_if` leaves them out.
    let optional = [
        (&b",\"opens_at\":"[..], &body.opens_at),
        (b",\"pass\":", &body.pass),
        (b",\"pass_expires_at\":", &body.pass_expires_at),
        (b",\"redirect\":", &body.redirect),
    ];
    for (key, value) in optional {
        if let Some(value) = value {
            out.put(key);
            out.string(value);
        }
    }
    out.put(b"}");
}

fn optional_number(out: &mut impl Sink, value: Option<u64>) {
    match value {
        Some(value) => out.number(value),
        None => out.put(b"null"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn waiting() -> StatusBody {
        StatusBody {
            room: "launch".to_owned(),
            state: TicketState::Waiting,
            ticket: "t1.launch.Ab-_0123456789abcdefgh.1234.2.mac".to_owned(),
            position: 1234,
            ahead: Some(57),
            serving: 1177,
            waiting: 9000,
            eta_seconds: Some(42),
            eta_basis: Some(EtaBasisName::Measured),
            next_poll_ms: 2000,
            opens_at: None,
            pass: None,
            pass_expires_at: None,
            redirect: None,
        }
    }

    fn assert_as_serde(body: &StatusBody) {
        let ours = encode(body);
        assert_eq!(ours.len(), ours.capacity());
        assert_eq!(
            String::from_utf8(ours).unwrap(),
            serde_json::to_string(body).unwrap()
        );
    }

    #[test]
    fn a_waiting_answer_is_written_as_serde_writes_it() {
        assert_as_serde(&waiting());
        assert_as_serde(&StatusBody {
            position: 0,
            ahead: Some(0),
            serving: u64::MAX,
            eta_seconds: None,
            eta_basis: None,
            ..waiting()
        });
    }

    #[test]
    fn a_prequeue_answer_has_nulls_and_its_opening() {
        assert_as_serde(&StatusBody {
            state: TicketState::Prequeue,
            ahead: None,
            eta_seconds: None,
            eta_basis: None,
            opens_at: Some("2026-11-22T10:00:00Z".to_owned()),
            ..waiting()
        });
    }

    #[test]
    fn an_admitted_answer_carries_its_pass_and_redirect() {
        assert_as_serde(&StatusBody {
            state: TicketState::Admitted,
            ahead: Some(0),
            eta_seconds: Some(0),
            eta_basis: Some(EtaBasisName::Configured),
            pass: Some("eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJ4In0.c2ln".to_owned()),
            pass_expires_at: Some("2026-11-22T10:10:00Z".to_owned()),
            redirect: Some("/checkout?item=\"42\"&name=Zoë ✓".to_owned()),
            ..waiting()
        });
    }

    #[test]
    fn every_character_is_escaped_as_serde_escapes_it() {
        let every_ascii: String = (0u8..=0x7f).map(char::from).collect();
        for redirect in [
            every_ascii.as_str(),
            "",
            "\\",
            "\"\"",
            "\u{7f}\u{80}\u{2028}\u{10ffff}",
        ] {
            assert_as_serde(&StatusBody {
                redirect: Some(redirect.to_owned()),
                ..waiting()
            });
        }
    }
}
