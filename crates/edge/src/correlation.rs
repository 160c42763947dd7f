//! The ids that tie a request's lines together across systems (SPEC §14.6): `X-Request-Id`
//! and the W3C trace context (`traceparent`, `tracestate`).
//!
//! Every header here may be forged. A request id is believed only from a trusted proxy (which
//! made it or passed on its own client's) and only when it is short printable text, so it can
//! go into log lines and the upstream's headers as it is; otherwise the node makes one. Trace
//! context is believed on the same terms (SPEC §14): though it grants nothing, a forged one
//! would choose the trace id the access log records and, by its sampled flag, switch off the
//! export of its own span. So a `traceparent` is kept only from a trusted proxy and only when
//! it is a well-formed version-00 value with non-zero ids; from any other peer, or invalid, it
//! is dropped and the node starts a new trace (whose sampling the node's own sampler decides),
//! and `tracestate` goes on only beside a kept `traceparent`.

use axum::http::{HeaderMap, HeaderName, HeaderValue};

/// `X-Request-Id`.
pub(crate) static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
static TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// The longest request id taken from a trusted proxy.
const MAX_REQUEST_ID: usize = 128;

/// A `tracestate` longer than this is dropped (the W3C limit is 32 members of at most 256
/// bytes; a longer one is not worth forwarding).
const MAX_TRACESTATE: usize = 512;

/// A request's correlation ids, as the upstream and the visitor get them.
#[derive(Debug, Clone)]
pub(crate) struct Correlation {
    /// The request id: a trusted proxy's, else a new random one.
    pub(crate) request_id: HeaderValue,
    /// A trusted proxy's valid trace context, if any.
    pub(crate) received: Option<TraceParent>,
    /// The trace context the upstream gets: the trusted proxy's, the node's span in its trace
    /// (with span export), or a new trace.
    pub(crate) trace: TraceParent,
    /// A trusted proxy's `tracestate`, kept only with its valid `traceparent`.
    tracestate: Option<HeaderValue>,
}

impl Correlation {
    /// The ids of a request with `headers` from a peer that is (`trusted`) or is not a trusted
    /// proxy; the incoming headers are removed (see [`insert_into`](Self::insert_into)).
    pub(crate) fn take(headers: &mut HeaderMap, trusted: bool) -> Correlation {
        // Most requests carry none of them: one pass over the names says so, where looking
        // each one up hashes its name.
        let any_sent = headers
            .keys()
            .any(|name| *name == X_REQUEST_ID || *name == TRACEPARENT || *name == TRACESTATE);
        if !any_sent {
            return Correlation {
                request_id: new_request_id(),
                received: None,
                trace: TraceParent::new(),
                tracestate: None,
            };
        }
        let sent_id = headers.remove(&X_REQUEST_ID);
        let request_id = sent_id
            .filter(|value| trusted && is_sane_request_id(value.as_bytes()))
            .unwrap_or_else(new_request_id);
        // Several `traceparent` lines are invalid (W3C trace context §3.2.2).
        let mut sent = headers.get_all(&TRACEPARENT).iter();
        let parsed = match (sent.next(), sent.next()) {
            (Some(value), None) if trusted => TraceParent::parse(value.as_bytes()),
            _ => None,
        };
        headers.remove(&TRACEPARENT);
        let tracestate = headers.remove(&TRACESTATE);
        let (trace, tracestate) = match parsed {
            Some(trace) => (
                trace,
                tracestate.filter(|value| value.len() <= MAX_TRACESTATE),
            ),
            None => (TraceParent::new(), None),
        };
        Correlation {
            request_id,
            received: parsed,
            trace,
            tracestate,
        }
    }

    /// Puts the ids into the headers of the request to the upstream, for hyper's client and
    /// WebSocket handshakes (the own client writes them: [`write_lines`](Self::write_lines)).
    pub(crate) fn insert_into(&self, headers: &mut HeaderMap) {
        headers.insert(X_REQUEST_ID.clone(), self.request_id.clone());
        headers.insert(TRACEPARENT.clone(), header_value(&self.trace.text()));
        if let Some(tracestate) = &self.tracestate {
            headers.insert(TRACESTATE.clone(), tracestate.clone());
        }
    }

    /// Writes the ids as HTTP/1.1 header lines of the request to the upstream, as
    /// [`insert_into`](Self::insert_into) would put them (without making, hashing and
    /// inserting header values the writer reads straight back). Every value is a header
    /// value or hex digits and dashes, so none holds a line break.
    pub(crate) fn write_lines(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"x-request-id: ");
        out.extend_from_slice(self.request_id.as_bytes());
        out.extend_from_slice(b"\r\ntraceparent: ");
        out.extend_from_slice(&self.trace.text());
        out.extend_from_slice(b"\r\n");
        if let Some(tracestate) = &self.tracestate {
            out.extend_from_slice(b"tracestate: ");
            out.extend_from_slice(tracestate.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// Short printable text without spaces or separators that could split a log line.
fn is_sane_request_id(value: &[u8]) -> bool {
    (1..=MAX_REQUEST_ID).contains(&value.len())
        && value
            .iter()
            .all(|byte| byte.is_ascii_alphanumeric() || b"-_.:+/=@".contains(byte))
}

/// A new request id: 128 random bits in hex.
fn new_request_id() -> HeaderValue {
    let mut id = [0; 32];
    write_hex(&mut id, rand::random::<u128>());
    header_value(&id)
}

/// `value`'s lowest `4 × out.len()` bits as lowercase hex digits, filling `out` (what
/// `format!("{value:0width$x}")` writes, without the formatting machinery and its string).
fn write_hex(out: &mut [u8], mut value: u128) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for digit in out.iter_mut().rev() {
        *digit = DIGITS[(value & 0xf) as usize];
        value >>= 4;
    }
}

/// A header value of hex digits and dashes (always valid).
fn header_value(text: &[u8]) -> HeaderValue {
    HeaderValue::from_bytes(text).unwrap_or_else(|_| HeaderValue::from_static("0"))
}

/// A W3C `traceparent` of version 00: the trace, the parent span and the flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TraceParent {
    /// The trace id (never zero).
    pub(crate) trace_id: u128,
    /// The caller's span id (never zero).
    pub(crate) parent_id: u64,
    /// The trace flags (bit 0: sampled).
    pub(crate) flags: u8,
}

impl TraceParent {
    /// A new trace, not sampled by anyone before this node.
    fn new() -> TraceParent {
        TraceParent {
            trace_id: rand::random::<u128>().max(1),
            parent_id: rand::random::<u64>().max(1),
            flags: 0,
        }
    }

    /// `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`, lowercase, with non-zero ids;
    /// anything else is `None`.
    fn parse(value: &[u8]) -> Option<TraceParent> {
        let value = std::str::from_utf8(value).ok()?;
        let mut fields = value.split('-');
        let (version, trace, parent, flags) = (
            fields.next()?,
            fields.next()?,
            fields.next()?,
            fields.next()?,
        );
        if fields.next().is_some() || version != "00" {
            return None;
        }
        let trace_id = lower_hex(trace, 32).and_then(|hex| u128::from_str_radix(hex, 16).ok())?;
        let parent_id = lower_hex(parent, 16).and_then(|hex| u64::from_str_radix(hex, 16).ok())?;
        let flags = lower_hex(flags, 2).and_then(|hex| u8::from_str_radix(hex, 16).ok())?;
        (trace_id != 0 && parent_id != 0).then_some(TraceParent {
            trace_id,
            parent_id,
            flags,
        })
    }

    /// The trace id as the W3C spells it.
    pub(crate) fn trace_id_hex(&self) -> String {
        format!("{:032x}", self.trace_id)
    }

    /// `00-<32 hex>-<16 hex>-<2 hex>`, as the `traceparent` field says it.
    fn text(&self) -> [u8; 55] {
        let mut text = *b"00-00000000000000000000000000000000-0000000000000000-00";
        write_hex(&mut text[3..35], self.trace_id);
        write_hex(&mut text[36..52], u128::from(self.parent_id));
        write_hex(&mut text[53..55], u128::from(self.flags));
        text
    }
}

/// `field` when it is exactly `length` lowercase hex digits.
fn lower_hex(field: &str, length: usize) -> Option<&str> {
    (field.len() == length
        && field
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte)))
    .then_some(field)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn headers(lines: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in lines {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn a_trusted_proxy_s_valid_traceparent_and_its_tracestate_go_on() {
        let mut sent = headers(&[("traceparent", VALID), ("tracestate", "vendor=1")]);
        let correlation = Correlation::take(&mut sent, true);
        assert!(correlation.received.is_some());
        let mut out = HeaderMap::new();
        correlation.insert_into(&mut out);
        assert_eq!(out["traceparent"], VALID);
        assert_eq!(out["tracestate"], "vendor=1");
    }

    #[test]
    fn an_untrusted_peer_s_trace_context_is_replaced_by_a_new_trace() {
        let mut sent = headers(&[("traceparent", VALID), ("tracestate", "vendor=1")]);
        let correlation = Correlation::take(&mut sent, false);
        assert_eq!(correlation.received, None);
        assert!(sent.is_empty(), "{sent:?}");
        let mut out = HeaderMap::new();
        correlation.insert_into(&mut out);
        let replaced = out["traceparent"].to_str().unwrap();
        assert_ne!(&replaced[3..35], &VALID[3..35]);
        assert!(TraceParent::parse(replaced.as_bytes()).is_some());
        assert!(!out.contains_key("tracestate"));
    }

    /// Each field alone, among others, is taken out of the request (the pass over the names
    /// that skips the look-ups when none came must see every one of them), and a request
    /// with none keeps its other fields and gets new ids.
    #[test]
    fn every_correlation_field_is_taken_out_even_alone() {
        for (field, value) in [
            ("x-request-id", "abc-123"),
            ("traceparent", VALID),
            ("tracestate", "vendor=1"),
        ] {
            for trusted in [true, false] {
                let mut sent = headers(&[("accept", "*/*"), (field, value), ("cookie", "a=1")]);
                Correlation::take(&mut sent, trusted);
                assert!(!sent.contains_key(field), "{field}, trusted: {trusted}");
                assert_eq!(sent.len(), 2, "{sent:?}");
            }
        }
        let mut sent = headers(&[("accept", "*/*"), ("cookie", "a=1")]);
        let fresh = Correlation::take(&mut sent, true);
        assert_eq!(sent.len(), 2);
        assert_eq!(fresh.received, None);
        assert_eq!(fresh.request_id.len(), 32);
        let mut out = HeaderMap::new();
        fresh.insert_into(&mut out);
        assert!(TraceParent::parse(out["traceparent"].as_bytes()).is_some());
        assert!(!out.contains_key("tracestate"));
    }

    #[test]
    fn an_invalid_traceparent_is_replaced_and_its_tracestate_dropped() {
        for invalid in [
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "garbage",
        ] {
            let mut sent = HeaderMap::new();
            sent.insert("traceparent", HeaderValue::from_static(invalid));
            sent.insert("tracestate", HeaderValue::from_static("vendor=1"));
            let correlation = Correlation::take(&mut sent, true);
            let mut out = HeaderMap::new();
            correlation.insert_into(&mut out);
            let replaced = out["traceparent"].to_str().unwrap();
            assert_ne!(replaced, invalid);
            assert!(
                TraceParent::parse(replaced.as_bytes()).is_some(),
                "{replaced}"
            );
            assert!(!out.contains_key("tracestate"), "{invalid}");
        }
    }

    #[test]
    fn ids_are_written_as_format_writes_them() {
        for value in [0, 1, 0xabc, u128::from(u64::MAX) << 7, u128::MAX] {
            let mut hex = [0; 32];
            write_hex(&mut hex, value);
            assert_eq!(std::str::from_utf8(&hex).unwrap(), format!("{value:032x}"));
        }
        let trace = TraceParent {
            trace_id: 0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736,
            parent_id: 0x00f0_67aa_0ba9_02b7,
            flags: 1,
        };
        assert_eq!(&trace.text(), VALID.as_bytes());
        assert_eq!(new_request_id().len(), 32);
    }

    /// The lines the own client writes are the fields hyper's client gets in its map: the
    /// same names and values, for a kept, a replaced and a new trace context.
    #[test]
    fn the_written_lines_are_the_inserted_fields() {
        let sent: [&[(&'static str, &'static str)]; 3] = [
            &[
                ("x-request-id", "lb-1"),
                ("traceparent", VALID),
                ("tracestate", "v=1"),
            ],
            &[("traceparent", "garbage"), ("tracestate", "v=1")],
            &[],
        ];
        for lines in sent {
            let correlation = Correlation::take(&mut headers(lines), true);
            let mut inserted = HeaderMap::new();
            correlation.insert_into(&mut inserted);
            let mut written = Vec::new();
            correlation.write_lines(&mut written);
            let mut expected = Vec::new();
            for (name, value) in &inserted {
                expected.extend_from_slice(name.as_str().as_bytes());
                expected.extend_from_slice(b": ");
                expected.extend_from_slice(value.as_bytes());
                expected.extend_from_slice(b"\r\n");
            }
            assert_eq!(
                String::from_utf8_lossy(&written),
                String::from_utf8_lossy(&expected),
                "{lines:?}"
            );
        }
    }

    #[test]
    fn two_traceparent_lines_are_invalid() {
        let mut sent = headers(&[("traceparent", VALID), ("traceparent", VALID)]);
        let correlation = Correlation::take(&mut sent, true);
        assert_ne!(correlation.trace.trace_id_hex(), VALID[3..35]);
    }

    #[test]
    fn a_request_id_is_kept_only_from_a_trusted_proxy_and_only_when_sane() {
        let kept = Correlation::take(&mut headers(&[("x-request-id", "abc-123")]), true);
        assert_eq!(kept.request_id, "abc-123");
        let untrusted = Correlation::take(&mut headers(&[("x-request-id", "abc-123")]), false);
        assert_ne!(untrusted.request_id, "abc-123");
        assert_eq!(untrusted.request_id.len(), 32);
        let odd = Correlation::take(&mut headers(&[("x-request-id", "a b\"c")]), true);
        assert_ne!(odd.request_id, "a b\"c");
        let long = "x".repeat(MAX_REQUEST_ID + 1);
        let mut sent = HeaderMap::new();
        sent.insert("x-request-id", HeaderValue::from_str(&long).unwrap());
        assert_ne!(Correlation::take(&mut sent, true).request_id, long.as_str());
    }
}
