//! The notice subscriber: one dedicated connection per store, subscribed (SSUBSCRIBE) to the
//! shard channel `<prefix>:{<room>}:events` of every followed room, turning each message into
//! a [`Notice`].
//!
//! - **Standalone**: a plain RESP2 connection of its own. Pub/sub holds a connection in
//!   subscriber mode, so it cannot share the multiplexed command connection; the frames of
//!   subscriber mode are flat arrays, read here by a small reader.
//! - **Cluster**: a RESP3 cluster connection whose push messages come through a channel; it
//!   routes each SSUBSCRIBE to the shard owning the room's slot and subscribes again after a
//!   reconnection.
//!
//! Whenever a subscription is (re)confirmed the subscriber sends [`Notice::Resync`]: anything
//! published while it was not listening has to be re-read. A silent connection (a stopped
//! server keeps its sockets open) is detected by PINGs and replaced. The task ends once the
//! store (the last [`Notices`](crate::Notices) handle) is gone.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::Weak;
use std::time::Duration;

use anteroom_core::RoomId;
use redis::cluster_async::ClusterConnection;
use redis::{ConnectionAddr, ConnectionInfo, ProtocolVersion, PushInfo, PushKind, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::notices::{Notice, NoticesInner, parse_notice};

/// How often the subscriber checks its connection (and whether the store still exists).
const HEARTBEAT: Duration = Duration::from_secs(1);

/// Longest pause between two connection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// A subscription that lasted this long was working: its failure starts a new backoff.
const WORKED_FOR: Duration = Duration::from_secs(5);

/// Where the subscriber connects.
pub(crate) enum Target {
    Standalone(ConnectionInfo),
    Cluster(Vec<String>),
}

/// What the subscriber needs to know; the task owns it.
pub(crate) struct Subscriber {
    pub(crate) target: Target,
    pub(crate) timeout: Duration,
    pub(crate) prefix: String,
    pub(crate) notices: Weak<NoticesInner>,
}

/// Why a subscription session ended.
enum Ended {
    /// The store is gone: stop for good.
    StoreDropped,
    /// The connection failed: connect again.
    Failed(String),
}

impl Subscriber {
    /// Keeps a subscription up until the store is dropped.
    pub(crate) async fn run(self) {
        let mut backoff = Duration::from_millis(50);
        let mut failing = false;
        loop {
            let started = Instant::now();
            let Err(ended) = match &self.target {
                Target::Standalone(info) => self.standalone(info).await,
                Target::Cluster(urls) => self.cluster(urls).await,
            };
            let Ended::Failed(why) = ended else {
                return;
            };
            // A session that ran a while was a working subscription: a new interruption.
            if started.elapsed() > WORKED_FOR {
                failing = false;
                backoff = Duration::from_millis(50);
            }
            if failing {
                tracing::debug!(%why, "room-change notices still unavailable");
            } else {
                tracing::warn!(%why, "room-change notices interrupted; reconnecting (views fall back to the ticker meanwhile)");
                failing = true;
            }
            if self.notices.strong_count() == 0 {
                return;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    fn channel(&self, room: &RoomId) -> String {
        format!("{}:{{{}}}:events", self.prefix, room)
    }

    fn room_of(&self, channel: &[u8]) -> Option<RoomId> {
        let channel = std::str::from_utf8(channel).ok()?;
        let inside = channel
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix(":{")?
            .strip_suffix("}:events")?;
        RoomId::new(inside).ok()
    }

    fn publish(&self, notice: Notice) -> Result<(), Ended> {
        let inner = self.notices.upgrade().ok_or(Ended::StoreDropped)?;
        inner.publish(notice);
        Ok(())
    }

    fn deliver(&self, channel: &[u8], payload: &[u8]) -> Result<(), Ended> {
        let (Some(room), Ok(payload)) = (self.room_of(channel), std::str::from_utf8(payload))
        else {
            return Ok(());
        };
        match parse_notice(room, payload) {
            Some(notice) => self.publish(Notice::Changed(notice)),
            None => {
                tracing::debug!(payload, "ignoring an unreadable room-change notice");
                Ok(())
            }
        }
    }

    fn followed(&self) -> Result<(BTreeSet<RoomId>, std::sync::Arc<NoticesInner>), Ended> {
        let inner = self.notices.upgrade().ok_or(Ended::StoreDropped)?;
        Ok((inner.followed(), inner))
    }

    /// Waits up to the store's timeout for `step`; a failure or the timeout ends the session
    /// with `failed: <error>` or `timed_out`.
    async fn within<T, E: std::fmt::Display>(
        &self,
        step: impl Future<Output = Result<T, E>>,
        failed: &str,
        timed_out: &str,
    ) -> Result<T, Ended> {
        match tokio::time::timeout(self.timeout, step).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(Ended::Failed(format!("{failed}: {error}"))),
            Err(_) => Err(Ended::Failed(timed_out.to_owned())),
        }
    }

    // Standalone ------------------------------------------------------------------------------

    /// Connects, authenticates, then follows the rooms until the session ends (it never ends
    /// well: the store is gone or the connection failed).
    async fn standalone(&self, info: &ConnectionInfo) -> Result<Infallible, Ended> {
        let ConnectionAddr::Tcp(host, port) = info.addr() else {
            return Err(Ended::Failed(
                "notices need a plain TCP redis address".to_owned(),
            ));
        };
        let connect = TcpStream::connect((host.as_str(), *port));
        let stream = self
            .within(connect, "cannot connect", "connecting timed out")
            .await?;
        let _ = stream.set_nodelay(true);
        let (read, mut write) = stream.into_split();
        let (frames_sender, mut frames) = mpsc::channel(1024);
        // The reader owns the read half; reading in its own task keeps frames whole whatever
        // the loop below is doing.
        let reader = tokio::spawn(read_frames(BufReader::new(read), frames_sender));
        let _stop_reader = AbortOnDrop(reader);
        self.authenticate(info, &mut write, &mut frames).await?;

        let mut subscribed = BTreeSet::new();
        let mut heartbeat = tokio::time::interval(HEARTBEAT);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_heard = Instant::now();
        loop {
            let (followed, inner) = self.followed()?;
            self.sync_standalone(&mut write, &mut subscribed, &followed)
                .await
                .map_err(|error| Ended::Failed(format!("cannot subscribe: {error}")))?;
            // Only this loop holds the notices while the store is gone.
            let store_dropped = std::sync::Arc::strong_count(&inner) == 1;
            let follow_changed = inner.follow_changed.notified();
            tokio::select! {
                frame = frames.recv() => {
                    let frame = frame.ok_or_else(|| Ended::Failed("connection closed".to_owned()))?;
                    last_heard = Instant::now();
                    self.standalone_frame(frame)?;
                }
                () = follow_changed => {}
                _ = heartbeat.tick() => {
                    if store_dropped {
                        return Err(Ended::StoreDropped);
                    }
                    if last_heard.elapsed() > self.timeout + HEARTBEAT {
                        return Err(Ended::Failed("redis stopped answering".to_owned()));
                    }
                    if let Err(error) = write.write_all(&redis::cmd("PING").get_packed_command()).await {
                        return Err(Ended::Failed(format!("cannot ping: {error}")));
                    }
                }
            }
        }
    }

    /// Sends AUTH when the URL names a password, and waits for the answer.
    async fn authenticate(
        &self,
        info: &ConnectionInfo,
        write: &mut OwnedWriteHalf,
        frames: &mut mpsc::Receiver<Frame>,
    ) -> Result<(), Ended> {
        let settings = info.redis_settings();
        let Some(password) = settings.password() else {
            return Ok(());
        };
        let mut auth = redis::cmd("AUTH");
        if let Some(username) = settings.username() {
            auth.arg(username);
        }
        auth.arg(password);
        if let Err(error) = write.write_all(&auth.get_packed_command()).await {
            return Err(Ended::Failed(format!("cannot authenticate: {error}")));
        }
        match tokio::time::timeout(self.timeout, frames.recv()).await {
            Ok(Some(Frame::Simple(_))) => Ok(()),
            Ok(Some(Frame::Error(error))) => {
                Err(Ended::Failed(format!("authentication refused: {error}")))
            }
            _ => Err(Ended::Failed("no answer to AUTH".to_owned())),
        }
    }

    /// Subscribes to newly followed rooms and unsubscribes from the others.
    async fn sync_standalone(
        &self,
        write: &mut OwnedWriteHalf,
        subscribed: &mut BTreeSet<RoomId>,
        followed: &BTreeSet<RoomId>,
    ) -> std::io::Result<()> {
        let added: Vec<&RoomId> = followed.difference(subscribed).collect();
        if !added.is_empty() {
            let mut command = redis::cmd("SSUBSCRIBE");
            for room in &added {
                command.arg(self.channel(room));
            }
            write.write_all(&command.get_packed_command()).await?;
        }
        let removed: Vec<&RoomId> = subscribed.difference(followed).collect();
        if !removed.is_empty() {
            let mut command = redis::cmd("SUNSUBSCRIBE");
            for room in &removed {
                command.arg(self.channel(room));
            }
            write.write_all(&command.get_packed_command()).await?;
        }
        subscribed.clone_from(followed);
        Ok(())
    }

    fn standalone_frame(&self, frame: Frame) -> Result<(), Ended> {
        match frame {
            Frame::Array(items) => match items.first().map(Vec::as_slice) {
                Some(b"smessage") if items.len() == 3 => self.deliver(&items[1], &items[2]),
                Some(b"ssubscribe") => self.publish(Notice::Resync),
                _ => Ok(()),
            },
            Frame::Error(error) => Err(Ended::Failed(format!("redis refused: {error}"))),
            Frame::Simple(_) => Ok(()),
        }
    }

    // Cluster ---------------------------------------------------------------------------------

    /// Connects with RESP3 (pushes come through a channel), then follows the rooms until the
    /// session ends.
    async fn cluster(&self, urls: &[String]) -> Result<Infallible, Ended> {
        let (push_sender, mut pushes) = mpsc::unbounded_channel();
        let client = redis::cluster::ClusterClientBuilder::new(urls.to_vec())
            .use_protocol(ProtocolVersion::RESP3)
            .push_sender(push_sender)
            .connection_timeout(self.timeout)
            .response_timeout(self.timeout)
            .build()
            .map_err(|error| Ended::Failed(format!("invalid cluster configuration: {error}")))?;
        let mut connection = self
            .within(
                client.get_async_connection(),
                "cannot connect",
                "connecting timed out",
            )
            .await?;
        let mut subscribed: BTreeSet<RoomId> = BTreeSet::new();
        let mut heartbeat = tokio::time::interval(HEARTBEAT);
        loop {
            let (followed, inner) = self.followed()?;
            self.sync_cluster(&mut connection, &mut subscribed, &followed)
                .await?;
            // Only this loop holds the notices while the store is gone.
            let store_dropped = std::sync::Arc::strong_count(&inner) == 1;
            let follow_changed = inner.follow_changed.notified();
            tokio::select! {
                push = pushes.recv() => {
                    let push = push.ok_or_else(|| Ended::Failed("connection closed".to_owned()))?;
                    self.cluster_push(push)?;
                }
                () = follow_changed => {}
                _ = heartbeat.tick() => {
                    if store_dropped {
                        return Err(Ended::StoreDropped);
                    }
                }
            }
        }
    }

    /// Subscribes to newly followed rooms (each on the shard owning its slot) and
    /// unsubscribes from the others.
    async fn sync_cluster(
        &self,
        connection: &mut ClusterConnection,
        subscribed: &mut BTreeSet<RoomId>,
        followed: &BTreeSet<RoomId>,
    ) -> Result<(), Ended> {
        for room in followed.difference(&subscribed.clone()) {
            let channel = self.channel(room);
            self.within(
                connection.ssubscribe(&channel),
                "cannot subscribe",
                "subscribing timed out",
            )
            .await?;
            subscribed.insert(room.clone());
        }
        for room in subscribed.clone().difference(followed) {
            let channel = self.channel(room);
            let _ = tokio::time::timeout(self.timeout, connection.sunsubscribe(&channel)).await;
            subscribed.remove(room);
        }
        Ok(())
    }

    fn cluster_push(&self, push: PushInfo) -> Result<(), Ended> {
        match push.kind {
            PushKind::SMessage => match push.data.as_slice() {
                [Value::BulkString(channel), Value::BulkString(payload), ..] => {
                    self.deliver(channel, payload)
                }
                _ => Ok(()),
            },
            // A (re)confirmed subscription, or a lost connection the client will subscribe
            // again: either way something may have been missed.
            PushKind::SSubscribe | PushKind::Disconnection => self.publish(Notice::Resync),
            _ => Ok(()),
        }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One frame of a RESP2 connection in subscriber mode: a flat array of bulk strings and
/// integers (integers kept as their text), or a simple string or an error.
#[derive(Debug, PartialEq, Eq)]
enum Frame {
    Array(Vec<Vec<u8>>),
    Simple(String),
    Error(String),
}

/// Reads frames until the connection closes or sends something unreadable.
async fn read_frames(mut reader: impl AsyncBufRead + Unpin, frames: mpsc::Sender<Frame>) {
    while let Ok(frame) = read_frame(&mut reader).await {
        if frames.send(frame).await.is_err() {
            return;
        }
    }
}

/// Longest bulk string accepted (a notice is a few dozen bytes).
const MAX_BULK: usize = 1 << 20;

async fn read_frame(reader: &mut (impl AsyncBufRead + Unpin)) -> std::io::Result<Frame> {
    let line = read_line(reader).await?;
    let (kind, rest) = line.split_at(1.min(line.len()));
    match kind {
        "*" => {
            let count: usize = parse_length(rest)?;
            let mut items = Vec::with_capacity(count.min(16));
            for _ in 0..count {
                items.push(read_item(reader).await?);
            }
            Ok(Frame::Array(items))
        }
        "+" => Ok(Frame::Simple(rest.to_owned())),
        "-" => Ok(Frame::Error(rest.to_owned())),
        _ => Err(unreadable(&line)),
    }
}

/// One element of a subscriber-mode array: a bulk string or an integer.
async fn read_item(reader: &mut (impl AsyncBufRead + Unpin)) -> std::io::Result<Vec<u8>> {
    let line = read_line(reader).await?;
    if let Some(number) = line.strip_prefix(':') {
        return Ok(number.as_bytes().to_vec());
    }
    let Some(length) = line.strip_prefix('$') else {
        return Err(unreadable(&line));
    };
    if length == "-1" {
        return Ok(Vec::new());
    }
    let length = parse_length(length)?;
    if length > MAX_BULK {
        return Err(unreadable(&line));
    }
    let mut bytes = vec![0; length + 2];
    reader.read_exact(&mut bytes).await?;
    bytes.truncate(length);
    Ok(bytes)
}

async fn read_line(reader: &mut (impl AsyncBufRead + Unpin)) -> std::io::Result<String> {
    let mut line = String::new();
    let read = reader.read_line(&mut line).await?;
    if read == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    line.truncate(line.trim_end_matches(['\r', '\n']).len());
    Ok(line)
}

fn parse_length(text: &str) -> std::io::Result<usize> {
    text.parse().map_err(|_| unreadable(text))
}

fn unreadable(text: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("unreadable frame from redis: {text:?}"),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn subscriber_mode_frames_are_read_whole() {
        let bytes: &[u8] = b"*3\r\n$10\r\nssubscribe\r\n$3\r\nabc\r\n:1\r\n\
            *3\r\n$8\r\nsmessage\r\n$3\r\nabc\r\n$12\r\ntick|1|2|3|4\r\n\
            +OK\r\n-ERR no\r\n";
        let mut reader = BufReader::new(bytes);
        assert_eq!(
            read_frame(&mut reader).await.unwrap(),
            Frame::Array(vec![b"ssubscribe".to_vec(), b"abc".to_vec(), b"1".to_vec()])
        );
        assert_eq!(
            read_frame(&mut reader).await.unwrap(),
            Frame::Array(vec![
                b"smessage".to_vec(),
                b"abc".to_vec(),
                b"tick|1|2|3|4".to_vec()
            ])
        );
        assert_eq!(
            read_frame(&mut reader).await.unwrap(),
            Frame::Simple("OK".to_owned())
        );
        assert_eq!(
            read_frame(&mut reader).await.unwrap(),
            Frame::Error("ERR no".to_owned())
        );
        assert!(read_frame(&mut reader).await.is_err());
    }
}
