//! The write-ahead log on disk: replay after a crash, torn and damaged frames, checkpoints.
//!
//! A crash image is a copy of the store's directory taken while the store runs, between
//! acknowledged operations and with no checkpoint under way (the checkpoint threshold is
//! far away): every acknowledged append was synced and redb is idle, so the copy holds what a
//! crash at that moment leaves on disk.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anteroom_core::engine::{Entry, JoinRequest, Ticket};
use anteroom_core::room::RoomConfig;
use anteroom_core::{ManualClock, RoomId, TicketId, Timestamp};

use super::checkpoint::{self, Dirty};
use super::wal::{self, Write};
use super::{RedbOptions, RedbStore};
use crate::persisted;
use crate::{RoomStore, StoreError};

const NEVER: u64 = 1 << 40;

fn options(checkpoint_bytes: u64) -> RedbOptions {
    RedbOptions {
        seed: Some(3),
        checkpoint_bytes,
        ..RedbOptions::default()
    }
}

fn room() -> RoomId {
    RoomId::new("wal").unwrap()
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(Timestamp(1_700_000_000_000)))
}

fn store_path(dir: &Path) -> PathBuf {
    dir.join("store.redb")
}

/// A new redb database at `path` with the store's tables.
fn database_with_tables(path: &Path) -> redb::Database {
    let database = redb::Database::create(path).unwrap();
    super::create_tables(&database).unwrap();
    database
}

/// The key of ticket `id` (its 16 bytes all `id`) in the test's room.
fn ticket_key(id: u8) -> Vec<u8> {
    super::tables::record_key(&room(), &[id; 16])
}

/// Every ticket record in `database`'s tickets table, in key order.
fn stored_tickets(database: &redb::Database) -> Vec<(Vec<u8>, Vec<u8>)> {
    use redb::{ReadableDatabase, ReadableTable};
    let read = database.begin_read().unwrap();
    let table = read.open_table(super::TICKETS).unwrap();
    table
        .iter()
        .unwrap()
        .map(|entry| {
            let (key, value) = entry.unwrap();
            (key.value().to_vec(), value.value().to_vec())
        })
        .collect()
}

/// Waits until `done` holds, failing with `what` after 30 s: checkpoints run on a thread of
/// their own and may end after the joins that called for them, later still on a busy machine.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A store with one room where everybody after the first waits, and `joins` joins made one
/// after another (one log frame each).
async fn store_with_joins(dir: &Path, joins: usize, checkpoint_bytes: u64) -> RedbStore {
    let store = RedbStore::open_with(&store_path(dir), clock(), options(checkpoint_bytes)).unwrap();
    let mut config = RoomConfig::with_defaults(room());
    config.max_active = 1;
    store.put_room(config).await.unwrap();
    for _ in 0..joins {
        store.join(&room(), JoinRequest::default()).await.unwrap();
    }
    store
}

fn crash_image(from: &Path) -> tempfile::TempDir {
    let image = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        // A log segment the live store retires between the listing and the copy is not part
        // of the image (a crash at that moment would not have it either).
        match std::fs::copy(entry.path(), image.path().join(entry.file_name())) {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => panic!("copying {}: {error}", entry.path().display()),
        }
    }
    image
}

async fn tickets(store: &RedbStore) -> Vec<Ticket> {
    let mut tickets = store.records(&room()).await.unwrap().tickets;
    tickets.sort_by_key(|ticket| ticket.position);
    tickets
}

fn positions(tickets: &[Ticket]) -> Vec<u64> {
    tickets.iter().map(|ticket| ticket.position).collect()
}

fn open(dir: &Path) -> Result<RedbStore, StoreError> {
    RedbStore::open_with(&store_path(dir), clock(), options(NEVER))
}

/// Why opening failed, with every cause (as the binary reports it).
fn open_error(dir: &Path) -> String {
    let Err(error) = open(dir) else {
        panic!("the store opened");
    };
    let mut text = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn segments(dir: &Path) -> Vec<(u64, PathBuf)> {
    wal::list_segments(&store_path(dir)).unwrap()
}

/// Waits until `dir` holds `count` log segments: the checkpoint of a replayed log runs on the
/// checkpoint thread after opening, and deletes the replayed segments when it is durable.
fn wait_for_segments(dir: &Path, count: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while segments(dir).len() != count {
        assert!(
            std::time::Instant::now() < deadline,
            "log segments {:?}, expected {count}",
            segments(dir)
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn newest_segment(dir: &Path) -> PathBuf {
    segments(dir).pop().unwrap().1
}

async fn join_position(store: &RedbStore) -> u64 {
    match store.join(&room(), JoinRequest::default()).await.unwrap() {
        Entry::Waiting(waiting) => waiting.position,
        Entry::Admitted(admitted) => admitted.position,
    }
}

#[tokio::test]
async fn acknowledged_joins_are_replayed_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_joins(dir.path(), 40, NEVER).await;
    let image = crash_image(dir.path());
    let before = tickets(&store).await;
    assert_eq!(store.checkpoints(), 0, "nothing reached redb but the log");
    drop(store);
    assert_eq!(segments(image.path()).len(), 1);

    let store = open(image.path()).unwrap();
    assert_eq!(tickets(&store).await, before, "every record came back");
    assert_eq!(store.snapshot(&room()).await.unwrap().last_position, 40);
    // The replayed log is checkpointed and deleted while the store serves; a fresh segment
    // is open.
    wait_for_segments(image.path(), 1);
    assert_eq!(
        store.checkpoints(),
        0,
        "the checkpoint at opening is not counted"
    );
    assert_eq!(join_position(&store).await, 41);
}

/// A crash before the checkpoint of the replayed log is durable (or during it) leaves the
/// replayed segments beside the new one; the next opening replays them all.
#[tokio::test]
async fn a_crash_before_the_replayed_log_is_checkpointed_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_joins(dir.path(), 40, NEVER).await;
    let image = crash_image(dir.path());
    drop(store);
    // redb and the log as the first crash left them, before the opening checkpoint.
    let pristine = crash_image(image.path());

    let store = open(image.path()).unwrap();
    for _ in 0..5 {
        join_position(&store).await;
    }
    let before = tickets(&store).await;
    let second = crash_image(image.path());
    drop(store);
    // The state a crash leaves before the opening checkpoint commits: redb as it was, the
    // replayed segment, and the segment the reopened store logs into.
    std::fs::copy(store_path(pristine.path()), store_path(second.path())).unwrap();
    let replayed = wal::segment_path(&store_path(second.path()), 1);
    std::fs::copy(newest_segment(pristine.path()), &replayed).unwrap();
    assert_eq!(
        segments(second.path())
            .iter()
            .map(|(number, _)| *number)
            .collect::<Vec<_>>(),
        vec![1, 2]
    );

    let store = open(second.path()).unwrap();
    assert_eq!(tickets(&store).await, before, "every record came back");
    assert_eq!(join_position(&store).await, 46);
}

/// Cuts the last `bytes` bytes off `file`, as a crash during an append leaves it.
/// Where the log in segment `path` ends (the zeros written ahead of it start there).
fn log_end(path: &Path) -> usize {
    let contents = wal::read_segment(path, true).unwrap();
    assert_eq!(contents.torn_at, None);
    contents.end
}

/// Tears the last frame of segment `file` as a crash during the append that grew the file
/// can: the file ends `bytes` bytes before that frame does.
fn cut_short(file: &Path, bytes: usize) {
    let end = log_end(file) - bytes;
    std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .unwrap()
        .set_len(u64::try_from(end).unwrap())
        .unwrap();
}

#[tokio::test]
async fn a_torn_last_frame_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_joins(dir.path(), 40, NEVER).await;
    let image = crash_image(dir.path());
    let before = tickets(&store).await;
    drop(store);
    let segment = newest_segment(image.path());
    cut_short(&segment, 5);

    let store = open(image.path()).unwrap();
    assert_eq!(
        tickets(&store).await,
        before[..39],
        "the join whose frame was torn is gone, every earlier one is there"
    );
    assert_eq!(store.snapshot(&room()).await.unwrap().last_position, 39);
    assert_eq!(join_position(&store).await, 40);
}

/// A restart cuts the torn tail off, so the segment reads whole once it is no longer the
/// newest (after a crash before the checkpoint of the replayed log deletes it).
#[tokio::test]
async fn a_torn_tail_cut_off_reads_whole_in_an_older_segment() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_joins(dir.path(), 40, NEVER).await;
    let image = crash_image(dir.path());
    drop(store);
    let segment = newest_segment(image.path());
    cut_short(&segment, 5);
    let torn = wal::read_segment(&segment, true).unwrap();
    assert!(wal::read_segment(&segment, false).is_err());
    wal::cut_torn_tail(&segment, torn.torn_at.unwrap()).unwrap();
    let cut = wal::read_segment(&segment, false).unwrap();
    assert_eq!((cut.frames.len(), cut.torn_at), (torn.frames.len(), None));
}

/// Most frames are written over zeros the file already holds (their sync then writes no
/// metadata); the log ends where the zeros start, in the newest segment and in older ones.
#[test]
fn a_segment_grows_by_zeros_ahead_of_its_log_which_ends_where_they_start() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_path(dir.path());
    let path = wal::segment_path(&store, 1);
    let mut segment = wal::Segment::create(&store, 1).unwrap();
    let mut frame = Vec::new();
    let state = Write::State {
        room: room(),
        bytes: b"state".to_vec(),
    };
    wal::encode_frame(std::iter::once(&state), &mut frame);
    segment.append(&frame).unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(size > segment.len, "zeros are written ahead of the log");
    for _ in 0..9 {
        segment.append(&frame).unwrap();
    }
    assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
    let end = usize::try_from(segment.len).unwrap();
    drop(segment);
    for newest in [true, false] {
        let contents = wal::read_segment(&path, newest).unwrap();
        assert_eq!((contents.frames.len(), contents.torn_at), (10, None));
        assert_eq!(contents.end, end);
    }

    // Bytes after the end: an append whose start a crash kept from the disk.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[end + 20] = 1;
    std::fs::write(&path, bytes).unwrap();
    let torn = wal::read_segment(&path, true).unwrap();
    assert_eq!((torn.frames.len(), torn.torn_at), (10, Some(end)));
    assert!(wal::read_segment(&path, false).is_err());
}

#[test]
fn a_segment_header_cut_short_is_written_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(dir.path());
    drop(wal::Segment::create(&path, 1).unwrap());
    let segment = wal::segment_path(&path, 1);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap()
        .set_len(5)
        .unwrap();
    let torn = wal::read_segment(&segment, true).unwrap();
    assert_eq!(torn.torn_at, Some(0));
    wal::cut_torn_tail(&segment, 0).unwrap();
    let cut = wal::read_segment(&segment, false).unwrap();
    assert_eq!((cut.frames.len(), cut.torn_at), (0, None));
}

/// The records a restore reads: redb's, with the replayed log's newer versions and
/// deletions laid over them, in key order.
#[test]
fn the_replayed_log_is_laid_over_redb() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(dir.path());
    let database = database_with_tables(&path);
    let mut stored = Dirty::default();
    for id in [1, 2, 3, 5] {
        stored.absorb(Write::Ticket {
            key: ticket_key(id),
            bytes: Some(vec![id]),
        });
    }
    checkpoint::checkpoint(&database, &path, &stored, 1).unwrap();
    let mut log = Dirty::default();
    for (id, bytes) in [
        (0, Some(10)),
        (2, None),
        (3, Some(13)),
        (4, Some(14)),
        (6, Some(16)),
    ] {
        log.absorb(Write::Ticket {
            key: ticket_key(id),
            bytes: bytes.map(|byte| vec![byte]),
        });
    }
    log.absorb(Write::Ticket {
        key: super::tables::record_key(&RoomId::new("other").unwrap(), &[9; 16]),
        bytes: Some(vec![99]),
    });

    use redb::ReadableDatabase;
    let read = database.begin_read().unwrap();
    let table = read.open_table(super::TICKETS).unwrap();
    let (start, end) = super::tables::room_range(&room());
    let range = table.range(start.as_slice()..end.as_slice()).unwrap();
    let merged: Vec<Vec<u8>> = super::overlaid(Some(range), log.tickets_of(&room()))
        .map(|record| record.unwrap().bytes().to_vec())
        .collect();
    assert_eq!(
        merged,
        vec![vec![10], vec![1], vec![13], vec![14], vec![5], vec![16]]
    );
    let merged_without_redb: Vec<Vec<u8>> = super::overlaid(None, log.tickets_of(&room()))
        .map(|record| record.unwrap().bytes().to_vec())
        .collect();
    assert_eq!(
        merged_without_redb,
        vec![vec![10], vec![13], vec![14], vec![16]]
    );
}

/// Records are kept in log order, a key once per version: the checkpoint and the restore both
/// take the latest version of each key, a forgetting included, whatever the order of keys.
#[test]
fn the_latest_version_of_a_record_is_the_one_written_and_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(dir.path());
    let database = database_with_tables(&path);
    let mut dirty = Dirty::default();
    for (id, bytes) in [
        (7, Some(1)),
        (3, Some(2)),
        (7, Some(3)),
        (5, Some(4)),
        (3, None),
        (7, Some(5)),
        (5, None),
        (5, Some(6)),
    ] {
        dirty.absorb(Write::Ticket {
            key: ticket_key(id),
            bytes: bytes.map(|byte| vec![byte]),
        });
    }
    let expected = vec![
        (ticket_key(3), None),
        (ticket_key(5), Some(vec![6])),
        (ticket_key(7), Some(vec![5])),
    ];
    let read: Vec<(Vec<u8>, Option<Vec<u8>>)> = dirty
        .tickets_of(&room())
        .into_iter()
        .map(|(key, bytes)| (key.to_vec(), bytes.map(<[u8]>::to_vec)))
        .collect();
    assert_eq!(read, expected);

    checkpoint::checkpoint(&database, &path, &dirty, 1).unwrap();
    let stored = stored_tickets(&database);
    assert_eq!(
        stored,
        vec![(ticket_key(5), vec![6]), (ticket_key(7), vec![5])]
    );
}

/// A room deleted and created again in the replayed log: what redb held of it before the
/// deletion stays gone although the checkpoint has not run yet.
#[tokio::test]
async fn a_room_deleted_in_the_replayed_log_keeps_only_its_new_records() {
    let dir = tempfile::tempdir().unwrap();
    drop(store_with_joins(dir.path(), 10, NEVER).await);
    let store = open(dir.path()).unwrap();
    wait_for_segments(dir.path(), 1);
    assert!(store.delete_room(&room()).await.unwrap());
    let mut config = RoomConfig::with_defaults(room());
    config.max_active = 1;
    store.put_room(config).await.unwrap();
    for _ in 0..3 {
        join_position(&store).await;
    }
    let before = tickets(&store).await;
    assert_eq!(positions(&before), vec![1, 2, 3]);
    let image = crash_image(dir.path());
    drop(store);

    let store = open(image.path()).unwrap();
    assert_eq!(tickets(&store).await, before);
}

fn flip_byte(path: &Path, offset_from_log_end: Option<usize>, offset: u64) {
    let index = match offset_from_log_end {
        Some(back) => log_end(path) - back,
        None => usize::try_from(offset).unwrap(),
    };
    let mut bytes = std::fs::read(path).unwrap();
    bytes[index] ^= 0x5a;
    std::fs::write(path, bytes).unwrap();
}

#[tokio::test]
async fn a_last_frame_failing_its_checksum_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_joins(dir.path(), 10, NEVER).await;
    let image = crash_image(dir.path());
    let before = tickets(&store).await;
    drop(store);
    flip_byte(&newest_segment(image.path()), Some(1), 0);

    let store = open(image.path()).unwrap();
    assert_eq!(tickets(&store).await, before[..9]);
}

#[tokio::test]
async fn damage_before_the_last_frame_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_joins(dir.path(), 10, NEVER).await;
    let image = crash_image(dir.path());
    drop(store);
    // Inside the first frame's body (the room's configuration).
    flip_byte(&newest_segment(image.path()), None, wal::HEADER_LEN + 40);

    let error = open_error(image.path());
    assert!(
        error.contains("cannot replay the embedded store's log")
            && error.contains("checksum mismatch before the last frame"),
        "{error}"
    );
}

#[tokio::test]
async fn a_damaged_older_segment_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_joins(dir.path(), 10, NEVER).await;
    let image = crash_image(dir.path());
    drop(store);
    let (number, first) = segments(image.path()).pop().unwrap();
    // A second segment after it (the same frames again: replaying them twice is harmless),
    // then the first one torn: only the newest segment may end in a torn frame.
    std::fs::copy(
        &first,
        wal::segment_path(&store_path(image.path()), number + 1),
    )
    .unwrap();
    cut_short(&first, 3);

    let error = open_error(image.path());
    assert!(error.contains("not the torn end of the log"), "{error}");
}

#[tokio::test]
async fn a_missing_segment_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_joins(dir.path(), 3, NEVER).await;
    let image = crash_image(dir.path());
    drop(store);
    let (number, path) = segments(image.path()).pop().unwrap();
    std::fs::rename(
        &path,
        wal::segment_path(&store_path(image.path()), number + 1),
    )
    .unwrap();

    let error = open_error(image.path());
    assert!(error.contains("missing segment"), "{error}");
}

#[tokio::test]
async fn a_log_of_another_format_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_joins(dir.path(), 3, NEVER).await;
    let image = crash_image(dir.path());
    drop(store);
    let segment = newest_segment(image.path());
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[12..16].copy_from_slice(&2u32.to_le_bytes());
    std::fs::write(&segment, bytes).unwrap();

    let error = open_error(image.path());
    assert!(error.contains("log format version 2"), "{error}");
}

#[tokio::test]
async fn frequent_checkpoints_keep_the_log_short_and_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(store_with_joins(dir.path(), 0, 2048).await);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..50 {
                store.join(&room(), JoinRequest::default()).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    eventually(
        "two checkpoints ran and deleted the segments they covered",
        || store.checkpoints() >= 2 && segments(dir.path()).len() <= 2,
    )
    .await;
    let before = tickets(&store).await;
    assert_eq!(positions(&before), (1..=400).collect::<Vec<_>>());
    drop(Arc::into_inner(store).unwrap());

    assert!(
        segments(dir.path()).is_empty(),
        "a clean stop checkpoints everything"
    );
    let store = open(dir.path()).unwrap();
    assert_eq!(tickets(&store).await, before);
}

/// Whether opening the redb file in `dir` needed redb's full repair (a walk of the whole file).
fn opening_repairs(dir: &Path) -> bool {
    let repaired = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = repaired.clone();
    let database = redb::Database::builder()
        .set_repair_callback(move |_| flag.store(true, std::sync::atomic::Ordering::Relaxed))
        .create(store_path(dir))
        .unwrap();
    drop(database);
    repaired.load(std::sync::atomic::Ordering::Relaxed)
}

#[tokio::test]
async fn a_crash_after_a_checkpoint_opens_without_walking_the_whole_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_joins(dir.path(), 60, 2048).await;
    // Checkpoints run on their own thread: the image is taken once they are over.
    let mut checkpoints = store.checkpoints();
    loop {
        std::thread::sleep(std::time::Duration::from_millis(100));
        if store.checkpoints() == checkpoints && segments(dir.path()).len() == 1 {
            break;
        }
        checkpoints = store.checkpoints();
    }
    assert!(checkpoints >= 1, "no checkpoint ran");
    let before = tickets(&store).await;
    let image = crash_image(dir.path());
    let probe = crash_image(image.path());
    drop(store);

    assert!(
        !opening_repairs(probe.path()),
        "the checkpoint recorded redb's allocator state"
    );
    let restarted = open(image.path()).unwrap();
    assert_eq!(tickets(&restarted).await, before);
}

#[test]
fn a_frame_of_many_rooms_keeps_each_room_s_last_state() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_path(dir.path());
    // Two rounds of state records over more rooms than a frame looks up in a list, so the
    // first round's records are all superseded.
    let state = |round: usize, room: usize| Write::State {
        room: RoomId::new(&format!("room-{room}")).unwrap(),
        bytes: format!("state {round} of room {room}").into_bytes(),
    };
    for rooms in [3, 20] {
        let writes: Vec<Write> = (0..2)
            .flat_map(|round| (0..rooms).map(move |room| state(round, room)))
            .collect();
        let mut segment = wal::Segment::create(&store, 1).unwrap();
        let mut frame = Vec::new();
        wal::encode_frame(writes.iter(), &mut frame);
        segment.append(&frame).unwrap();
        let contents = wal::read_segment(&wal::segment_path(&store, 1), true).unwrap();
        assert_eq!(
            contents.frames,
            vec![writes[rooms..].to_vec()],
            "{rooms} rooms"
        );
        drop(segment);
        std::fs::remove_file(wal::segment_path(&store, 1)).unwrap();
    }
}

#[test]
fn frames_carry_every_kind_of_record() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_path(dir.path());
    let writes = [
        Write::Config {
            room: room(),
            bytes: b"config".to_vec(),
        },
        Write::State {
            room: room(),
            bytes: b"state 1".to_vec(),
        },
        Write::Ticket {
            key: b"wal\0ticket".to_vec(),
            bytes: Some(b"ticket".to_vec()),
        },
        Write::Ticket {
            key: b"wal\0gone".to_vec(),
            bytes: None,
        },
        Write::Session {
            key: b"wal\0session".to_vec(),
            bytes: Some(b"session".to_vec()),
        },
        Write::Session {
            key: b"wal\0ended".to_vec(),
            bytes: None,
        },
        Write::DeleteRoom {
            room: RoomId::new("old").unwrap(),
        },
        Write::Event {
            sequence: 7,
            payload: b"{\"type\":\"ticket.joined\"}".to_vec(),
        },
        Write::State {
            room: room(),
            bytes: b"state 2".to_vec(),
        },
    ];
    let mut segment = wal::Segment::create(&store, 1).unwrap();
    let mut frame = Vec::new();
    wal::encode_frame(writes.iter(), &mut frame);
    segment.append(&frame).unwrap();
    wal::encode_frame(writes[2..3].iter(), &mut frame);
    segment.append(&frame).unwrap();

    let contents = wal::read_segment(&wal::segment_path(&store, 1), true).unwrap();
    assert_eq!(contents.torn_at, None);
    let expected: Vec<Write> = writes
        .iter()
        .filter(|write| !matches!(write, Write::State { bytes, .. } if bytes == b"state 1"))
        .cloned()
        .collect();
    assert_eq!(
        contents.frames,
        vec![expected, vec![writes[2].clone()]],
        "a frame keeps only the last state of a room"
    );
}

#[test]
fn a_room_deleted_and_created_again_keeps_only_its_new_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(dir.path());
    let database = database_with_tables(&path);
    let mut dirty = Dirty::default();
    for write in [
        Write::Ticket {
            key: ticket_key(1),
            bytes: Some(b"old".to_vec()),
        },
        Write::DeleteRoom { room: room() },
        Write::Ticket {
            key: ticket_key(2),
            bytes: Some(b"new".to_vec()),
        },
    ] {
        dirty.absorb(write);
    }
    checkpoint::checkpoint(&database, &path, &dirty, 1).unwrap();
    // A ticket redb already held before the room was deleted goes too.
    let mut dirty = Dirty::default();
    dirty.absorb(Write::Ticket {
        key: ticket_key(3),
        bytes: Some(b"older".to_vec()),
    });
    checkpoint::checkpoint(&database, &path, &dirty, 2).unwrap();
    let mut dirty = Dirty::default();
    dirty.absorb(Write::DeleteRoom { room: room() });
    dirty.absorb(Write::Ticket {
        key: ticket_key(4),
        bytes: Some(b"newest".to_vec()),
    });
    checkpoint::checkpoint(&database, &path, &dirty, 3).unwrap();

    let stored = stored_tickets(&database);
    assert_eq!(stored, vec![(ticket_key(4), b"newest".to_vec())]);
    assert_eq!(checkpoint::checkpointed_through(&database).unwrap(), 3);
}

#[tokio::test]
async fn a_log_of_version_1_json_records_is_replayed() {
    // What a store written before the binary records leaves after a crash: a log segment
    // whose records are JSON.
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(dir.path());
    let mut config = RoomConfig::with_defaults(room());
    config.max_active = 1;
    let state = br#"{"v":1,"generation":1,"last_position":2,"serving":1,"bucket_units":0,"bucket_updated_at":1700000000000,"rate_admissions":0.0,"rate_seconds":0.0,"rate_measured_until":null,"totals":{"joined":2,"admitted":1,"no_show":0,"abandoned":0,"left":0,"passes":0,"completed":0,"sessions_abandoned":0,"expired":0}}"#;
    let admitted = br#"{"v":1,"id":"BgYGBgYGBgYGBgYGBgYGBg","position":1,"generation":1,"joined_at":1700000000000,"last_seen":1700000000000,"identity":null,"return_to":null,"state":{"kind":"admitted","at":1700000000000,"claim_deadline":1700000120000}}"#;
    let waiting = br#"{"v":1,"id":"BwcHBwcHBwcHBwcHBwcHBw","position":2,"generation":1,"joined_at":1700000000000,"last_seen":1700000000000,"identity":null,"return_to":null,"state":{"kind":"waiting"}}"#;
    let writes = [
        Write::Config {
            room: room(),
            bytes: persisted::encode_config(&config),
        },
        Write::State {
            room: room(),
            bytes: state.to_vec(),
        },
        Write::Ticket {
            key: ticket_key(6),
            bytes: Some(admitted.to_vec()),
        },
        Write::Ticket {
            key: ticket_key(7),
            bytes: Some(waiting.to_vec()),
        },
    ];
    let mut segment = wal::Segment::create(&path, 1).unwrap();
    let mut frame = Vec::new();
    wal::encode_frame(writes.iter(), &mut frame);
    segment.append(&frame).unwrap();
    drop(segment);

    let store = open(dir.path()).unwrap();
    let replayed = tickets(&store).await;
    assert_eq!(positions(&replayed), vec![1, 2]);
    assert_eq!(replayed[1].id, TicketId::from_bytes([7; 16]));
    assert_eq!(store.snapshot(&room()).await.unwrap().last_position, 2);
    assert_eq!(join_position(&store).await, 3, "numbering goes on");
    drop(store);
    // redb now holds version 1 records beside version 2 ones.
    let store = open(dir.path()).unwrap();
    assert_eq!(positions(&tickets(&store).await), vec![1, 2, 3]);
}

/// Events are records of the change's own log frame: a crash right after acknowledged joins
/// loses none of their events, whether a checkpoint had moved them into redb or they were
/// only in the log.
#[tokio::test]
async fn the_events_of_acknowledged_changes_survive_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open_with(&store_path(dir.path()), clock(), options(4096)).unwrap();
    let outbox = store.event_outbox(crate::OutboxLimits::default()).unwrap();
    let mut config = RoomConfig::with_defaults(room());
    config.max_active = 1;
    store.put_room(config).await.unwrap();
    for _ in 0..60 {
        store.join(&room(), JoinRequest::default()).await.unwrap();
    }
    eventually("some events reached redb", || store.checkpoints() > 0).await;
    let image = crash_image(dir.path());
    drop(outbox);
    drop(store);

    let store = open(image.path()).unwrap();
    let outbox = store.event_outbox(crate::OutboxLimits::default()).unwrap();
    let events = outbox.pending("hook", 1000).await.unwrap();
    let sequences: Vec<u64> = events.iter().map(|entry| entry.sequence).collect();
    // The first join was admitted and claimed at once: joined, admitted, pass.issued.
    assert_eq!(sequences, (1..=62).collect::<Vec<_>>());
    let kinds: Vec<String> = events
        .iter()
        .map(|entry| {
            let event: serde_json::Value = serde_json::from_slice(&entry.payload).unwrap();
            event["type"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(
        kinds.iter().filter(|kind| *kind == "ticket.joined").count(),
        60
    );
    // Sequences go on after the crash.
    store.join(&room(), JoinRequest::default()).await.unwrap();
    let after = outbox.pending("hook", 1000).await.unwrap();
    assert_eq!(after.last().unwrap().sequence, 63);
}

/// The tickets stream into the room as they are read: one that cannot be decoded still
/// refuses the open, naming its room, whichever tickets came before it.
#[test]
fn an_unreadable_ticket_in_redb_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = store_path(dir.path());
    let database = redb::Database::create(&path).unwrap();
    super::create_tables(&database).unwrap();
    let ticket = Ticket {
        id: TicketId::from_bytes([1; 16]),
        position: 1,
        generation: 1,
        joined_at: Timestamp(1_700_000_000_000),
        last_seen: Timestamp(1_700_000_000_000),
        identity: None,
        return_to: None,
        priority: false,
        state: anteroom_core::engine::TicketState::Waiting,
    };
    let mut dirty = Dirty::default();
    for write in [
        Write::Config {
            room: room(),
            bytes: persisted::encode_config(&RoomConfig::with_defaults(room())),
        },
        Write::Ticket {
            key: ticket_key(1),
            bytes: Some(persisted::encode_ticket(&ticket)),
        },
        Write::Ticket {
            key: ticket_key(2),
            bytes: Some(b"not a ticket".to_vec()),
        },
    ] {
        dirty.absorb(write);
    }
    checkpoint::checkpoint(&database, &path, &dirty, 1).unwrap();
    drop(database);
    let error = open_error(dir.path());
    assert!(
        error.contains("corrupt record ticket in room wal"),
        "{error}"
    );
}

fn kept_room() -> RoomId {
    RoomId::new("kept").unwrap()
}

/// A store whose file held `visitors` ended tickets, all forgotten since (their history
/// expired): most of the file unused, beside `kept` tickets still waiting in room `kept`
/// (joined at the same time, so their pages lie all over the file). Answers the store,
/// still open, and the largest size its file had before the history was forgotten.
async fn store_after_expired_history(
    dir: &Path,
    (visitors, kept): (usize, usize),
    compact_min_bytes: u64,
) -> (Arc<RedbStore>, u64) {
    let clock = clock();
    let options = RedbOptions {
        compact_min_bytes,
        ..options(256 * 1024)
    };
    let store = Arc::new(RedbStore::open_with(&store_path(dir), clock.clone(), options).unwrap());
    let mut config = RoomConfig::with_defaults(room());
    config.mode = anteroom_core::room::Mode::QueueAll;
    config.ticket_idle_ttl = std::time::Duration::from_secs(60);
    config.history_retention = std::time::Duration::from_secs(60);
    let mut kept_config = config.clone();
    kept_config.id = kept_room();
    kept_config.ticket_idle_ttl = std::time::Duration::from_secs(24 * 3600);
    store.put_room(config).await.unwrap();
    store.put_room(kept_config).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let every = (visitors + kept) / kept.max(1);
            for n in 0..(visitors + kept) / 32 {
                let room = if kept > 0 && n % every == 0 {
                    kept_room()
                } else {
                    room()
                };
                store.join(&room, JoinRequest::default()).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    // Abandoned, then forgotten: one tick each.
    let mut largest = file_size(dir);
    for _ in 0..2 {
        clock.advance(std::time::Duration::from_secs(61));
        store.tick(&room()).await.unwrap();
        largest = largest.max(file_size(dir));
    }
    assert_eq!(store.records(&room()).await.unwrap().tickets.len(), 0);
    (store, largest)
}

fn file_size(dir: &Path) -> u64 {
    std::fs::metadata(store_path(dir)).unwrap().len()
}

/// The file grows with the history and is compacted once the history has expired and its
/// deletions are checkpointed; what is left opens with every live record.
#[tokio::test]
async fn the_file_is_compacted_once_history_expires() {
    let dir = tempfile::tempdir().unwrap();
    let (store, largest) = store_after_expired_history(dir.path(), (16_384, 0), 1024 * 1024).await;
    // A checkpoint starts with a write once the log has grown enough (and the one before it
    // is done): the joins here are those writes.
    let mut joined = Vec::new();
    for _ in 0..1_000 {
        if store.compactions() > 0 {
            break;
        }
        joined.push(join_position(&store).await);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        store.compactions(),
        1,
        "compacted after the deleting checkpoint"
    );
    let compacted = file_size(dir.path());
    eprintln!("store file {largest} bytes before the compaction, {compacted} after");
    assert!(compacted * 2 < largest, "{compacted} of {largest} bytes");
    let live = tickets(&store).await;
    drop(Arc::into_inner(store).unwrap());
    let store = open(dir.path()).unwrap();
    assert_eq!(tickets(&store).await, live);
    assert_eq!(positions(&live), joined);
}

/// The environment variable naming the store the child process compacts.
const COMPACT_CHILD_STORE: &str = "ANTEROOM_TEST_COMPACT_STORE";

/// In the child process of the next test (its own test binary again, with
/// [`COMPACT_CHILD_STORE`] set): compacts that store, saying on its output when it starts and
/// when it is done.
#[allow(clippy::print_stdout)] // its output is what the parent reads
fn compact_as_child(path: &Path) {
    let mut database = redb::Database::builder().create(path).unwrap();
    println!("compacting");
    let done = super::compaction::compact(&mut database, path).unwrap();
    println!("compacted in {} us", done.took.as_micros());
}

/// Runs [`compact_as_child`] on the store in `dir`, killed (SIGKILL) `after` its compaction
/// started (never, with `None`); answers how long the compaction took when it finished.
fn compact_in_child(dir: &Path, after: Option<std::time::Duration>) -> Option<u64> {
    use std::io::BufRead;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "redb_store::tests::a_compaction_killed_midway_loses_nothing",
            "--nocapture",
        ])
        .env(COMPACT_CHILD_STORE, store_path(dir))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let started = lines.find(|line| line.as_deref().is_ok_and(|l| l == "compacting"));
    assert!(started.is_some(), "the child started compacting");
    if let Some(after) = after {
        std::thread::sleep(after);
        child.kill().unwrap();
    }
    let took = lines.find_map(|line| {
        let line = line.ok()?;
        line.strip_prefix("compacted in ")?
            .strip_suffix(" us")?
            .parse()
            .ok()
    });
    child.wait().unwrap();
    took
}

/// A SIGKILL at any moment of a compaction loses nothing: the store opens with every record.
#[tokio::test]
async fn a_compaction_killed_midway_loses_nothing() {
    if let Some(path) = std::env::var_os(COMPACT_CHILD_STORE) {
        compact_as_child(Path::new(&path));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = store_after_expired_history(dir.path(), (16_384, 8_192), u64::MAX).await;
    let kept = store.records(&kept_room()).await.unwrap();
    drop(Arc::into_inner(store).unwrap());
    let whole = compact_in_child(crash_image(dir.path()).path(), None).unwrap();
    eprintln!("a whole compaction took {whole} us");
    let mut interrupted = 0;
    for eighth in 0..8 {
        let image = crash_image(dir.path());
        let after = std::time::Duration::from_micros(whole * eighth / 8);
        if compact_in_child(image.path(), Some(after)).is_none() {
            interrupted += 1;
        }
        let store = open(image.path()).unwrap();
        let records = store.records(&kept_room()).await.unwrap();
        assert_eq!(
            records.tickets.len(),
            kept.tickets.len(),
            "killed after {after:?}"
        );
        let mut found = records.tickets;
        let mut expected = kept.tickets.clone();
        found.sort_by_key(|ticket| ticket.position);
        expected.sort_by_key(|ticket| ticket.position);
        // Restore counts every waiting ticket as seen at the opening.
        for ticket in found.iter_mut().chain(expected.iter_mut()) {
            ticket.last_seen = ticket.joined_at;
        }
        assert_eq!(found, expected, "killed after {after:?}");
    }
    eprintln!("{interrupted} of 8 compactions killed before they finished");
    assert!(interrupted > 0, "no kill landed inside a compaction");
}

/// A segment prepared ahead and renamed into place is appended to without growing: the log
/// goes over the zeros it came with, and reads back whole.
#[test]
fn a_prepared_segment_is_appended_to_over_its_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_path(dir.path());
    let prepared = wal::PreparedSegment::write(&store, 4096).unwrap();
    let size = std::fs::metadata(wal::prepared_path(&store)).unwrap().len();
    assert_eq!(size, wal::PREALLOCATION_CHUNK, "zeros written ahead");
    assert!(
        segments(dir.path()).is_empty(),
        "the log does not read it yet"
    );
    let mut segment = wal::Segment::adopt(&store, 1, prepared).unwrap();
    assert!(!wal::prepared_path(&store).exists(), "renamed into place");
    let path = wal::segment_path(&store, 1);
    let mut frame = Vec::new();
    let state = Write::State {
        room: room(),
        bytes: b"state".to_vec(),
    };
    wal::encode_frame(std::iter::once(&state), &mut frame);
    for _ in 0..10 {
        segment.append(&frame).unwrap();
    }
    assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
    let end = usize::try_from(segment.len).unwrap();
    drop(segment);
    let contents = wal::read_segment(&path, true).unwrap();
    assert_eq!((contents.frames.len(), contents.torn_at), (10, None));
    assert_eq!(contents.end, end);
}

/// Joins until the store has started a segment it had prepared (its size is the prepared
/// one, `checkpoint_bytes` and a chunk, not the single chunk a segment created on the commit
/// path grows to) and the checkpoint of the segment before it is done.
async fn store_on_a_prepared_segment(dir: &Path, checkpoint_bytes: u64) -> RedbStore {
    let store = store_with_joins(dir, 0, checkpoint_bytes).await;
    let prepared_size =
        (checkpoint_bytes + wal::PREALLOCATION_CHUNK).next_multiple_of(wal::PREALLOCATION_CHUNK);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let newest = segments(dir).pop().unwrap();
        if newest.0 > 1 && store.checkpoints() >= 1 && segments(dir).len() == 1 {
            assert_eq!(
                std::fs::metadata(&newest.1).unwrap().len(),
                prepared_size,
                "the new segment is the prepared one"
            );
            return store;
        }
        assert!(std::time::Instant::now() < deadline, "no segment started");
        store.join(&room(), JoinRequest::default()).await.unwrap();
        // Gives the preparing thread time to finish before the segment fills.
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
}

/// A crash while frames are written into a prepared segment: a torn last frame over its
/// zeros is cut off, everything before it comes back.
#[tokio::test]
async fn a_torn_frame_in_a_prepared_segment_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_on_a_prepared_segment(dir.path(), 32 * 1024).await;
    for _ in 0..5 {
        store.join(&room(), JoinRequest::default()).await.unwrap();
    }
    let image = crash_image(dir.path());
    let before = tickets(&store).await;
    drop(store);
    flip_byte(&newest_segment(image.path()), Some(1), 0);

    let store = open(image.path()).unwrap();
    assert_eq!(tickets(&store).await, before[..before.len() - 1]);
    let last = before.last().unwrap().position;
    assert_eq!(join_position(&store).await, last);
}

/// A crash image of a store after `joins` joins (no checkpoint), and its tickets.
async fn crash_image_after_joins(joins: usize) -> (tempfile::TempDir, Vec<Ticket>) {
    let dir = tempfile::tempdir().unwrap();
    let store = store_with_joins(dir.path(), joins, NEVER).await;
    let image = crash_image(dir.path());
    let before = tickets(&store).await;
    drop(store);
    (image, before)
}

/// A crash after a prepared segment was renamed into place and before any frame went into
/// it: it is the newest segment and empty, and the one before it reads whole.
#[tokio::test]
async fn a_crash_right_after_a_prepared_segment_is_renamed_loses_nothing() {
    let (image, before) = crash_image_after_joins(40).await;
    let path = store_path(image.path());
    let prepared = wal::PreparedSegment::write(&path, 4096).unwrap();
    drop(wal::Segment::adopt(&path, 2, prepared).unwrap());

    let store = open(image.path()).unwrap();
    assert_eq!(tickets(&store).await, before);
    assert_eq!(join_position(&store).await, 41);
}

/// A crash while a segment was being prepared leaves a partial file under the prepared name:
/// the log never reads it, and it is replaced by the next preparation or removed at a stop.
#[tokio::test]
async fn a_segment_whose_preparation_a_crash_interrupted_is_ignored_and_removed() {
    let (image, before) = crash_image_after_joins(40).await;
    let prepared = wal::prepared_path(&store_path(image.path()));
    std::fs::write(&prepared, b"anteroom-wal\x01\0\0\0\x07junk").unwrap();

    let store = open(image.path()).unwrap();
    assert_eq!(tickets(&store).await, before);
    assert_eq!(join_position(&store).await, 41);
    drop(store);
    assert!(!prepared.exists(), "a stop removes it");
    let store = open(image.path()).unwrap();
    assert_eq!(tickets(&store).await.len(), before.len() + 1);
}
