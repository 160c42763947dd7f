//! Event sinks (SPEC §8.4, §14.9): events wait in the store's outbox (anteroom-store's
//! `EventOutbox`): ticket and session events written by the store with the change itself,
//! and the node's own events (admin actions, `room.metrics`) appended before the action is
//! answered. One delivery loop per sink reads what the sink has not acknowledged yet,
//! delivers it, and acknowledges it only once delivered. A receiver that is down, or a
//! restart, only delays delivery: the events wait in the outbox (at-least-once; receivers
//! deduplicate on the event `id`). On a shared store every node runs the loops over the same
//! outbox and progress, and the node holding a sink's lease in the store delivers it (another
//! takes over once it stops renewing).
//!
//! - **log**: one line per event on the `anteroom::events` log target (JSON with
//!   `ANTEROOM_LOG_FORMAT=json`).
//! - **webhook**: `POST` of `{"events": [{"id", "type", "room", "at", "data"}, …]}`, at most
//!   `batch` events per request, with `Anteroom-Signature: t=<unix seconds>,v1=<hex>`, the
//!   HMAC-SHA256 of `<t>.<body>` under the sink's secret (the timestamp lets receivers refuse
//!   replays), and `Anteroom-Delivery: <first id>-<last id>`. Any 2xx acknowledges the batch;
//!   anything else (or no answer within `timeout`) is retried after an exponential backoff
//!   (0.5 s doubling up to 10 s, with jitter).
//!
//! A reload ([`EventSinks::replace`]) stops the loops of sinks that were removed or changed
//! and starts those of new or changed ones; an unchanged sink's loop runs on. A loop stopped
//! in the middle of a delivery has not acknowledged it, so the new loop delivers it again
//! (at-least-once holds).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http_body_util::Full;
use parking_lot::Mutex;
use serde_json::Value;
use sha2::Sha256;
use tokio::sync::Notify;

use anteroom_core::Clock;
use anteroom_core::config::{EventSinkConfig, EventSinkKind, WebhookConfig};
use anteroom_store::{EventOutbox, OutboxEntry, RoomStore};

use anteroom_api::WebhookClient;

use crate::admin_event::AdminEvent;

/// The first retry delay after a failed delivery.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// The longest retry delay.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How often delivered events are pruned from the outbox.
const PRUNE_EVERY: Duration = Duration::from_secs(30);
/// A delivery loop with nothing to do looks again this often (or when woken by an append).
const IDLE_POLL: Duration = Duration::from_secs(1);
/// Entries a log sink takes at once.
const LOG_BATCH: usize = 500;

/// The outbox as the admin surface appends to it; wakes the delivery loops.
#[derive(Clone)]
pub struct Outbox {
    store: Arc<dyn EventOutbox>,
    appended: Arc<Notify>,
}

impl Outbox {
    /// Appends events (as JSON); a failure is logged and the events are lost for the sinks
    /// (the action itself has happened).
    pub(crate) async fn append(&self, events: &[AdminEvent]) {
        let payloads = events
            .iter()
            .filter_map(|event| serde_json::to_vec(event).ok())
            .collect();
        match self.store.append(payloads).await {
            Ok(_) => self.appended.notify_waiters(),
            Err(error) => {
                tracing::error!(%error, events = events.len(), "cannot keep events for the event sinks");
            }
        }
    }
}

/// A configured sink with its secret read.
#[derive(Debug, Clone)]
pub struct Sink {
    /// The sink's configuration.
    pub config: EventSinkConfig,
    /// A webhook's HMAC key (from `secret` or `secret_file`).
    pub secret: Vec<u8>,
    /// A webhook's client: TLS for `https://` receivers, trusting the system's roots and
    /// those of the sink's `ca_file` (`anteroom_api::webhook_client`); none for a log sink.
    pub client: Option<WebhookClient>,
}

/// The running delivery loops; cheap to clone.
#[derive(Clone)]
pub struct EventSinks {
    outbox: Outbox,
    /// The store the outbox belongs to, which holds the sinks' delivery leases.
    rooms: Arc<dyn RoomStore>,
    /// This node's name in those leases (random per process).
    holder: String,
    clock: Arc<dyn Clock>,
    running: Arc<Mutex<Vec<Running>>>,
}

/// One sink's delivery loop.
struct Running {
    config: EventSinkConfig,
    secret: Vec<u8>,
    task: tokio::task::AbortHandle,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts one delivery loop per sink over `store` (and a pruner); the [`Outbox`] the admin
/// surface appends to (`AdminState::set_outbox`) is [`EventSinks::outbox`]. `rooms`
/// is the store the outbox belongs to: on a shared store, the node holding its lease
/// `event-sink:<name>` delivers that sink's events, so receivers do not get every batch once
/// per node.
pub fn spawn_event_sinks(
    store: Arc<dyn EventOutbox>,
    rooms: Arc<dyn RoomStore>,
    sinks: Vec<Sink>,
    clock: Arc<dyn Clock>,
) -> EventSinks {
    let outbox = Outbox {
        store,
        appended: Arc::new(Notify::new()),
    };
    let running = EventSinks {
        outbox,
        rooms,
        holder: format!("{:016x}", rand::random::<u64>()),
        clock,
        running: Arc::new(Mutex::new(Vec::new())),
    };
    running.replace(sinks);
    let store = running.outbox.store.clone();
    let pruned = Arc::downgrade(&running.running);
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(PRUNE_EVERY);
        loop {
            interval.tick().await;
            // The sinks of now: an event is dropped once each of them has it.
            let Some(running) = pruned.upgrade() else {
                return;
            };
            let names: Vec<String> = running
                .lock()
                .iter()
                .map(|sink| sink.config.name.clone())
                .collect();
            drop(running);
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            if let Err(error) = store.prune(&names).await {
                tracing::warn!(%error, "cannot prune delivered events");
            }
        }
    });
    running
}

impl EventSinks {
    /// The outbox the sinks deliver from.
    pub fn outbox(&self) -> Outbox {
        self.outbox.clone()
    }

    /// Runs exactly `sinks` from now on: unchanged ones go on, removed or changed ones stop,
    /// new or changed ones start. Returns how many loops stopped and started.
    pub fn replace(&self, sinks: Vec<Sink>) -> (usize, usize) {
        let mut running = self.running.lock();
        let before = running.len();
        running.retain(|current| {
            sinks
                .iter()
                .any(|sink| sink.config == current.config && sink.secret == current.secret)
        });
        let stopped = before - running.len();
        let mut started = 0;
        for sink in sinks {
            let unchanged = running
                .iter()
                .any(|current| current.config == sink.config && current.secret == sink.secret);
            if unchanged {
                continue;
            }
            let (config, secret) = (sink.config.clone(), sink.secret.clone());
            let lease = DeliveryLease::new(self.rooms.clone(), &self.holder, &sink.config);
            let task = tokio::spawn(deliver_forever(
                self.outbox.clone(),
                sink,
                lease,
                self.clock.clone(),
            ));
            running.push(Running {
                config,
                secret,
                task: task.abort_handle(),
            });
            started += 1;
        }
        (stopped, started)
    }
}

/// The right to deliver one sink's events among the nodes sharing a store.
struct DeliveryLease {
    store: Arc<dyn RoomStore>,
    name: String,
    holder: String,
    ttl: Duration,
}

impl DeliveryLease {
    fn new(store: Arc<dyn RoomStore>, holder: &str, sink: &EventSinkConfig) -> DeliveryLease {
        // Renewed before every read: it must outlast one delivery attempt and the longest
        // wait after a failure, or another node would deliver the same batch meanwhile.
        let attempt = match &sink.kind {
            EventSinkKind::Log => Duration::ZERO,
            EventSinkKind::Webhook(webhook) => webhook.timeout,
        };
        DeliveryLease {
            store,
            name: format!("event-sink:{}", sink.name),
            holder: holder.to_owned(),
            ttl: attempt + MAX_BACKOFF * 2 + Duration::from_secs(5),
        }
    }

    /// Takes or keeps the lease; `false` while another node holds it.
    async fn hold(&self) -> bool {
        match self
            .store
            .hold_lease(&self.name, &self.holder, self.ttl)
            .await
        {
            Ok(held) => held,
            Err(error) => {
                tracing::warn!(lease = %self.name, %error, "cannot take the event sink's lease");
                false
            }
        }
    }
}

async fn deliver_forever(outbox: Outbox, sink: Sink, lease: DeliveryLease, clock: Arc<dyn Clock>) {
    let name = sink.config.name.clone();
    let batch = match &sink.config.kind {
        EventSinkKind::Log => LOG_BATCH,
        EventSinkKind::Webhook(webhook) => webhook.batch,
    };
    let client = sink.client.clone();
    let mut backoff = FIRST_BACKOFF;
    let mut failing_since: Option<tokio::time::Instant> = None;
    loop {
        let woken = outbox.appended.notified();
        if !lease.hold().await {
            // Another node delivers; take over if it stops renewing.
            tokio::time::sleep(IDLE_POLL).await;
            continue;
        }
        let entries = match outbox.store.pending(&name, batch).await {
            Ok(entries) => entries,
            Err(error) => {
                tracing::warn!(sink = %name, %error, "cannot read the event outbox");
                tokio::time::sleep(MAX_BACKOFF).await;
                continue;
            }
        };
        // The outbox has no cheap count: what this read found, up to one batch, says whether
        // the sink keeps up (0) or falls behind (a full batch, read after read).
        metrics::gauge!("anteroom_event_sink_pending_events", "sink" => name.clone())
            .set(entries.len() as f64);
        if entries.is_empty() {
            let _ = tokio::time::timeout(IDLE_POLL, woken).await;
            continue;
        }
        let delivered = deliver(&sink, client.as_ref(), &entries, clock.as_ref()).await;
        match delivered {
            Ok(()) => {
                for (partition, sequence) in delivered_through(&entries) {
                    if let Err(error) = outbox.store.acknowledge(&name, partition, sequence).await {
                        tracing::warn!(sink = %name, %error, "cannot record a delivery; it will be repeated");
                    }
                }
                if let Some(since) = failing_since.take() {
                    tracing::info!(sink = %name, down_for = ?since.elapsed(), "event sink delivers again");
                }
                backoff = FIRST_BACKOFF;
            }
            Err(reason) => {
                metrics::counter!("anteroom_event_delivery_failures_total", "sink" => name.clone())
                    .increment(1);
                if failing_since.is_none() {
                    failing_since = Some(tokio::time::Instant::now());
                    tracing::warn!(sink = %name, %reason, "event delivery failed; retrying with backoff");
                }
                tokio::time::sleep(jittered(backoff)).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Hands the events of `entries` the sink takes to it: log lines, or one webhook request.
async fn deliver(
    sink: &Sink,
    client: Option<&WebhookClient>,
    entries: &[OutboxEntry],
    clock: &dyn Clock,
) -> Result<(), String> {
    let wanted: Vec<Value> = entries
        .iter()
        .filter_map(|entry| wanted_event(entry, &sink.config.types))
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    match &sink.config.kind {
        EventSinkKind::Log => {
            for event in &wanted {
                tracing::info!(target: "anteroom::events", sink = %sink.config.name, event = %event, "event");
            }
            Ok(())
        }
        EventSinkKind::Webhook(webhook) => match client {
            Some(client) => {
                post(
                    client,
                    webhook,
                    &sink.secret,
                    &wanted,
                    clock.now().as_secs(),
                )
                .await
            }
            None => Err("the webhook sink was built without a client".to_owned()),
        },
    }
}

/// The stored event (it carries its own `id`); `None` when the sink does not take its type
/// (or it cannot be read).
fn wanted_event(entry: &OutboxEntry, types: &[String]) -> Option<Value> {
    let event: Value = serde_json::from_slice(&entry.payload).ok()?;
    let kind = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !types.is_empty() && !types.iter().any(|wanted| wanted == kind) {
        return None;
    }
    Some(event)
}

/// The highest sequence read in each partition: what a delivery of `entries` acknowledges.
fn delivered_through(entries: &[OutboxEntry]) -> std::collections::BTreeMap<&str, u64> {
    let mut through = std::collections::BTreeMap::new();
    for entry in entries {
        let mark = through.entry(entry.partition.as_str()).or_insert(0);
        *mark = entry.sequence.max(*mark);
    }
    through
}

/// `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`.
pub fn signature(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("t={timestamp},v1={hex}")
}

async fn post(
    client: &WebhookClient,
    webhook: &WebhookConfig,
    secret: &[u8],
    events: &[Value],
    now_secs: u64,
) -> Result<(), String> {
    let body = serde_json::to_vec(&serde_json::json!({ "events": events }))
        .map_err(|error| error.to_string())?;
    let first = events.first().and_then(|e| e["id"].as_str()).unwrap_or("");
    let last = events.last().and_then(|e| e["id"].as_str()).unwrap_or("");
    let request = http::Request::post(&webhook.url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::USER_AGENT, "anteroom")
        .header("anteroom-signature", signature(secret, now_secs, &body))
        .header("anteroom-delivery", format!("{first}-{last}"))
        .body(Full::new(Bytes::from(body)))
        .map_err(|error| error.to_string())?;
    match tokio::time::timeout(webhook.timeout, client.request(request)).await {
        Err(_) => Err(format!("no answer within {:?}", webhook.timeout)),
        Ok(Err(error)) => Err(error.to_string()),
        Ok(Ok(response)) if response.status().is_success() => Ok(()),
        Ok(Ok(response)) => Err(format!("answered {}", response.status())),
    }
}

/// `delay` ± 20 %, so many nodes retrying do not beat in step.
fn jittered(delay: Duration) -> Duration {
    let factor = rand::Rng::gen_range(&mut rand::thread_rng(), 0.8..1.2);
    delay.mul_f64(factor)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn signatures_cover_the_timestamp_and_the_body() {
        let one = signature(b"secret", 1_700_000_000, b"{}");
        assert!(one.starts_with("t=1700000000,v1="));
        assert_eq!(one.len(), "t=1700000000,v1=".len() + 64);
        assert_ne!(one, signature(b"secret", 1_700_000_001, b"{}"));
        assert_ne!(one, signature(b"secret", 1_700_000_000, b"{ }"));
        assert_ne!(one, signature(b"other", 1_700_000_000, b"{}"));
    }

    fn entry(partition: &str, sequence: u64, kind: &str) -> OutboxEntry {
        OutboxEntry {
            partition: partition.to_owned(),
            sequence,
            payload: format!(r#"{{"id":"e{sequence}","type":"{kind}","at":"x","data":{{}}}}"#)
                .into_bytes(),
        }
    }

    #[test]
    fn events_follow_the_type_filter() {
        let entry = entry("", 7, "room.updated");
        assert_eq!(wanted_event(&entry, &[]).unwrap()["id"], "e7");
        assert!(wanted_event(&entry, &["ticket.admitted".to_owned()]).is_none());
        assert!(wanted_event(&entry, &["room.updated".to_owned()]).is_some());
    }

    #[test]
    fn a_delivery_acknowledges_each_partition_it_read() {
        let entries = [
            entry("", 3, "room.updated"),
            entry("shop", 9, "ticket.joined"),
            entry("shop", 10, "ticket.admitted"),
            entry("", 4, "room.metrics"),
        ];
        let through: Vec<(&str, u64)> = delivered_through(&entries).into_iter().collect();
        assert_eq!(through, [("", 4), ("shop", 10)]);
    }
}
