//! The embedded store's write-ahead log: the records each group commit changed, appended to a
//! segment file and made durable with one `fdatasync`, before redb sees them.
//!
//! A segment is a header (`anteroom-wal`, format version) followed by frames. A frame is the
//! length of its body, the body's xxh3-64 checksum and the body: the records of one group
//! commit, each a tag, a key and (for writes) a value. A frame is all or nothing: a torn or
//! damaged frame at the end of the newest segment is what a crash during an append leaves, and
//! reading stops there; anywhere else it is corruption and the store refuses to open, as it
//! does for a missing segment or another format version. A frame keeps only the last state
//! record of each room it carries. `redb_store/tests.rs` replays crash images (copies of a
//! running store's files).
//!
//! Segments are named `<store file>.wal-<number>` beside the store file and numbered from 1 up;
//! the checkpointer deletes the ones whose records redb holds durably.
//!
//! A segment grows ahead of its log by zeros written a chunk at a time, so that most frames
//! are written over blocks the file already has and their sync writes no metadata; a zero
//! frame header is the end of the log. Every segment after the first is written whole ahead
//! of its turn, zeros synced, under a name that is not a segment's (`<store file>.wal-next`,
//! `next_segment.rs`), and renamed into place when the log moves to it.

use std::fs::{File, OpenOptions};
use std::io::{Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

use anteroom_core::RoomId;

/// The first bytes of every segment.
const MAGIC: &[u8; 12] = b"anteroom-wal";
/// The frame format this version writes and reads.
const FORMAT_VERSION: u32 = 1;
/// Magic and version.
pub(crate) const HEADER_LEN: u64 = 16;
/// Body length (u32) and checksum (u64), little-endian.
const FRAME_HEADER_LEN: usize = 12;
/// No frame the log writes comes near this; a larger length field is damage.
const MAX_FRAME_BODY: usize = 1 << 30;
/// A segment grows by zeros written this many bytes at a time ([`Segment::append`]).
pub(crate) const PREALLOCATION_CHUNK: u64 = 1 << 20;

const TAG_CONFIG: u8 = 1;
const TAG_STATE: u8 = 2;
const TAG_TICKET_PUT: u8 = 3;
const TAG_TICKET_DELETE: u8 = 4;
const TAG_SESSION_PUT: u8 = 5;
const TAG_SESSION_DELETE: u8 = 6;
const TAG_DELETE_ROOM: u8 = 7;
const TAG_EVENT: u8 = 8;

/// One changed record, as the log and the checkpoints carry it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Write {
    /// A room's configuration (persisted form).
    Config { room: RoomId, bytes: Vec<u8> },
    /// A room's state (persisted form).
    State { room: RoomId, bytes: Vec<u8> },
    /// A ticket written (`Some`) or forgotten (`None`), keyed `room id, 0x00, ticket id`.
    Ticket {
        key: Vec<u8>,
        bytes: Option<Vec<u8>>,
    },
    /// A session written or forgotten, keyed like tickets.
    Session {
        key: Vec<u8>,
        bytes: Option<Vec<u8>>,
    },
    /// A room and every record of it deleted.
    DeleteRoom { room: RoomId },
    /// An event for the sinks (SPEC §14.9), keyed by its outbox sequence (8 bytes,
    /// little-endian), logged in the frame of the change it reports.
    Event { sequence: u64, payload: Vec<u8> },
}

/// Why the log could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WalError {
    #[error("cannot read or write {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a log segment of this store (bad header)")]
    NotASegment { path: PathBuf },
    #[error(
        "{path} has log format version {version}; this version reads only version {FORMAT_VERSION}"
    )]
    Version { path: PathBuf, version: u32 },
    #[error("{path} is damaged at byte {offset} ({what}); it is not the torn end of the log")]
    Damaged {
        path: PathBuf,
        offset: usize,
        what: &'static str,
    },
    #[error("{path}: the frame at byte {offset} passed its checksum but holds {what}")]
    Malformed {
        path: PathBuf,
        offset: usize,
        what: String,
    },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> WalError + '_ {
    move |source| WalError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The path of segment `number` of the store at `store`.
pub(crate) fn segment_path(store: &Path, number: u64) -> PathBuf {
    let mut name = store.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".wal-{number:010}"));
    store.with_file_name(name)
}

/// The segments beside `store`, by number, oldest first.
pub(crate) fn list_segments(store: &Path) -> Result<Vec<(u64, PathBuf)>, WalError> {
    let directory = match store.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => parent.to_owned(),
        None => PathBuf::from("."),
    };
    let prefix = format!(
        "{}.wal-",
        store.file_name().unwrap_or_default().to_string_lossy()
    );
    let mut segments = Vec::new();
    for entry in std::fs::read_dir(&directory).map_err(io_error(&directory))? {
        let entry = entry.map_err(io_error(&directory))?;
        let name = entry.file_name();
        let Some(number) = name
            .to_str()
            .and_then(|name| name.strip_prefix(&prefix))
            .filter(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|digits| digits.parse::<u64>().ok())
        else {
            continue;
        };
        segments.push((number, entry.path()));
    }
    segments.sort_unstable();
    Ok(segments)
}

/// Makes the creation or removal of files in `store`'s directory durable.
pub(crate) fn sync_directory(store: &Path) -> Result<(), WalError> {
    let directory = match store.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => parent.to_owned(),
        None => PathBuf::from("."),
    };
    File::open(&directory)
        .and_then(|dir| dir.sync_all())
        .map_err(io_error(&directory))
}

fn segment_header() -> Vec<u8> {
    let mut header = Vec::with_capacity(HEADER_LEN as usize);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    header
}

/// Cuts the torn tail (from [`read_segment`]'s `torn_at`) off the newest segment, durably.
/// A restart logs into a new segment before the replayed one is checkpointed and deleted, and
/// once it is not the newest a torn tail would read as damage; a header that a crash cut
/// short is written again whole (the segment held nothing).
pub(crate) fn cut_torn_tail(path: &Path, torn_at: usize) -> Result<(), WalError> {
    let mut file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io_error(path))?;
    let rewrite_header = (torn_at as u64) < HEADER_LEN;
    let cut = if rewrite_header { 0 } else { torn_at as u64 };
    file.set_len(cut)
        .and_then(|()| {
            if rewrite_header {
                file.write_all(&segment_header())
            } else {
                Ok(())
            }
        })
        .and_then(|()| file.sync_data())
        .map_err(io_error(path))
}

/// The segment being appended to.
pub(crate) struct Segment {
    pub(crate) number: u64,
    path: PathBuf,
    file: File,
    /// Bytes of log in the file, header included; the file's cursor stands here.
    pub(crate) len: u64,
    /// Bytes in the file: the log and the zeros written ahead of it.
    allocated: u64,
}

impl Segment {
    /// Creates segment `number` with its header, durably (file and directory entry).
    pub(crate) fn create(store: &Path, number: u64) -> Result<Segment, WalError> {
        let path = segment_path(store, number);
        let file = create_with_header(&path)?;
        file.sync_data().map_err(io_error(&path))?;
        sync_directory(store)?;
        Ok(Segment {
            number,
            path,
            file,
            len: HEADER_LEN,
            allocated: HEADER_LEN,
        })
    }

    /// Appends `frame` (from [`encode_frame`]) and waits until it is on disk.
    pub(crate) fn append(&mut self, frame: &[u8]) -> Result<(), WalError> {
        let end = self.len + frame.len() as u64;
        if end > self.allocated {
            self.preallocate(end).map_err(io_error(&self.path))?;
        }
        self.file
            .write_all(frame)
            .and_then(|()| self.file.sync_data())
            .map_err(io_error(&self.path))?;
        self.len = end;
        Ok(())
    }

    /// Makes `prepared` segment `number`: renamed into place and the rename made durable
    /// before any frame is written into it. Its zeros are on disk already, so no append into
    /// it writes any until the log outgrows them.
    pub(crate) fn adopt(
        store: &Path,
        number: u64,
        prepared: PreparedSegment,
    ) -> Result<Segment, WalError> {
        let from = prepared_path(store);
        let path = segment_path(store, number);
        std::fs::rename(&from, &path).map_err(io_error(&from))?;
        sync_directory(store)?;
        Ok(Segment {
            number,
            path,
            file: prepared.file,
            len: HEADER_LEN,
            allocated: prepared.allocated,
        })
    }

    /// Writes zeros past the log up to `end` rounded up to [`PREALLOCATION_CHUNK`], made
    /// durable by the append's sync. A frame written over zeros already on disk leaves the
    /// file's size and blocks as they are, so its `fdatasync` writes the data alone; a frame
    /// that grows the file also makes it write the inode (on ext4, one more write waited for
    /// in every sync). Space reserved with `fallocate` would not do: its blocks are marked
    /// unwritten, and the first write into each changes the file's extents. Readers take a
    /// zero frame header for the end of the log ([`read_segment`]). Segments after the first
    /// come zeroed ahead of their turn ([`PreparedSegment`]); this serves the first one and a
    /// segment that outgrows its zeros while a checkpoint runs.
    fn preallocate(&mut self, end: u64) -> std::io::Result<()> {
        let allocated = end.next_multiple_of(PREALLOCATION_CHUNK);
        self.file.seek(SeekFrom::Start(self.allocated))?;
        write_zeros(&mut self.file, allocated - self.allocated, |_| Ok(()))?;
        self.file.seek(SeekFrom::Start(self.len))?;
        self.allocated = allocated;
        Ok(())
    }
}

/// Writes `count` zeros at `file`'s cursor, at most [`PREALLOCATION_CHUNK`] bytes per
/// `write`, calling `after_chunk` after each.
fn write_zeros(
    file: &mut File,
    count: u64,
    mut after_chunk: impl FnMut(&File) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let zeros = vec![0u8; count.min(PREALLOCATION_CHUNK) as usize];
    let mut left = count;
    while left > 0 {
        let chunk = left.min(PREALLOCATION_CHUNK);
        file.write_all(&zeros[..chunk as usize])?;
        after_chunk(file)?;
        left -= chunk;
    }
    Ok(())
}

/// The file the next segment is prepared in ([`PreparedSegment`]) beside `store`. Its name
/// is no segment's, so the log never reads it; a crash leaves it to be written again.
pub(crate) fn prepared_path(store: &Path) -> PathBuf {
    let mut name = store.file_name().unwrap_or_default().to_os_string();
    name.push(".wal-next");
    store.with_file_name(name)
}

/// A segment written ahead of its turn under [`prepared_path`]: its header and zeros, synced,
/// the cursor after the header. [`Segment::adopt`] gives it its number.
pub(crate) struct PreparedSegment {
    file: File,
    /// Bytes in the file, header included.
    allocated: u64,
}

impl PreparedSegment {
    /// Writes a segment of `size` bytes (rounded up to [`PREALLOCATION_CHUNK`]) at
    /// [`prepared_path`], replacing what a crash or a stop left there. Each chunk of zeros is
    /// synced before the next is written, so the disk's queue never holds more than one chunk
    /// of them ahead of the log's own sync.
    pub(crate) fn write(store: &Path, size: u64) -> Result<PreparedSegment, WalError> {
        let path = prepared_path(store);
        let allocated = size
            .max(HEADER_LEN + 1)
            .next_multiple_of(PREALLOCATION_CHUNK);
        remove_if_present(&path)?;
        let mut file = create_with_header(&path)?;
        write_zeros(&mut file, allocated - HEADER_LEN, File::sync_data)
            .and_then(|()| file.seek(SeekFrom::Start(HEADER_LEN)))
            .map_err(io_error(&path))?;
        Ok(PreparedSegment { file, allocated })
    }
}

/// Creates the file of a new segment at `path` with its header, not synced yet.
fn create_with_header(path: &Path) -> Result<File, WalError> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io_error(path))?;
    file.write_all(&segment_header()).map_err(io_error(path))?;
    Ok(file)
}

/// Removes `path` if it exists.
pub(crate) fn remove_if_present(path: &Path) -> Result<(), WalError> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(WalError::Io {
            path: path.to_owned(),
            source: error,
        }),
        _ => Ok(()),
    }
}

/// Encodes `writes` as one frame into `out` (cleared first). A room's state is written once
/// per frame, its last version: a frame is replayed whole or not at all, so the earlier ones
/// would be overwritten anyway.
pub(crate) fn encode_frame<'a>(writes: impl Iterator<Item = &'a Write> + Clone, out: &mut Vec<u8>) {
    out.clear();
    out.resize(FRAME_HEADER_LEN, 0);
    let last_state = LastStates::of(writes.clone());
    for (index, write) in writes.enumerate() {
        match write {
            Write::Config { room, bytes } => put(out, TAG_CONFIG, room.as_str().as_bytes(), bytes),
            Write::State { room, bytes } => {
                if last_state.is_last(room.as_str(), index) {
                    put(out, TAG_STATE, room.as_str().as_bytes(), bytes);
                }
            }
            Write::Ticket {
                key,
                bytes: Some(bytes),
            } => put(out, TAG_TICKET_PUT, key, bytes),
            Write::Ticket { key, bytes: None } => delete(out, TAG_TICKET_DELETE, key),
            Write::Session {
                key,
                bytes: Some(bytes),
            } => put(out, TAG_SESSION_PUT, key, bytes),
            Write::Session { key, bytes: None } => delete(out, TAG_SESSION_DELETE, key),
            Write::DeleteRoom { room } => {
                delete(out, TAG_DELETE_ROOM, room.as_str().as_bytes());
            }
            Write::Event { sequence, payload } => {
                put(out, TAG_EVENT, &sequence.to_le_bytes(), payload);
            }
        }
    }
    let body_len = out.len() - FRAME_HEADER_LEN;
    let checksum = xxhash_rust::xxh3::xxh3_64(&out[FRAME_HEADER_LEN..]);
    // A frame holds at most one batch of records, far below 4 GiB.
    let body_len = u32::try_from(body_len).unwrap_or(u32::MAX);
    out[..4].copy_from_slice(&body_len.to_le_bytes());
    out[4..FRAME_HEADER_LEN].copy_from_slice(&checksum.to_le_bytes());
}

/// Past this many rooms in one frame, [`LastStates`] looks them up in a hash map.
const FEW_ROOMS: usize = 8;

/// Where each room's last state record stands in a frame's records. A frame carries one
/// state record per operation, nearly always of one room or a few: a short list searched
/// in place then costs less than hashing every record's room into a map built per frame; a
/// frame of many rooms takes the map, so its cost stays linear.
enum LastStates<'a> {
    Few(Vec<(&'a str, usize)>),
    Many(std::collections::HashMap<&'a str, usize>),
}

impl<'a> LastStates<'a> {
    fn of(writes: impl Iterator<Item = &'a Write> + Clone) -> LastStates<'a> {
        let states = writes.enumerate().filter_map(|(index, write)| match write {
            Write::State { room, .. } => Some((room.as_str(), index)),
            _ => None,
        });
        let mut few: Vec<(&str, usize)> = Vec::new();
        for (room, index) in states.clone() {
            if let Some(last) = few.iter_mut().find(|(known, _)| *known == room) {
                last.1 = index;
            } else if few.len() < FEW_ROOMS {
                few.push((room, index));
            } else {
                return LastStates::Many(states.collect());
            }
        }
        LastStates::Few(few)
    }

    fn is_last(&self, room: &str, index: usize) -> bool {
        match self {
            LastStates::Few(few) => few
                .iter()
                .any(|&(known, last)| last == index && known == room),
            LastStates::Many(many) => many.get(room) == Some(&index),
        }
    }
}

fn delete(out: &mut Vec<u8>, tag: u8, key: &[u8]) {
    out.push(tag);
    // Keys are a room id (at most 64 bytes) and a 16-byte id.
    out.extend_from_slice(&(key.len() as u16).to_le_bytes());
    out.extend_from_slice(key);
}

fn put(out: &mut Vec<u8>, tag: u8, key: &[u8], value: &[u8]) {
    delete(out, tag, key);
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(value);
}

/// What one segment holds.
#[derive(Debug, Default)]
pub(crate) struct SegmentContents {
    /// Its frames in order, each the records of one group commit.
    pub(crate) frames: Vec<Vec<Write>>,
    /// Where a torn or damaged tail starts, if the segment has one (ignored: it was never
    /// acknowledged).
    pub(crate) torn_at: Option<usize>,
    /// Where the log in it ends: the zeros written ahead of it, or a torn tail, start here.
    pub(crate) end: usize,
}

/// Reads segment `path`. `newest` says whether it is the last one, where a torn tail is
/// expected after a crash; elsewhere damage is an error.
pub(crate) fn read_segment(path: &Path, newest: bool) -> Result<SegmentContents, WalError> {
    let bytes = std::fs::read(path).map_err(io_error(path))?;
    if let Some(empty) = check_header(path, &bytes, newest)? {
        return Ok(empty);
    }
    let mut contents = SegmentContents::default();
    let mut offset = HEADER_LEN as usize;
    while offset < bytes.len() {
        match read_frame(path, &bytes, offset, newest)? {
            FrameRead::Whole { writes, len } => {
                contents.frames.push(writes);
                offset += len;
            }
            FrameRead::Torn => {
                contents.torn_at = Some(offset);
                break;
            }
            FrameRead::End => break,
        }
    }
    contents.end = contents.torn_at.unwrap_or(offset);
    Ok(contents)
}

/// Checks the segment's magic and format version. `Some` is the newest segment whose header
/// a crash cut short: empty, torn at 0.
fn check_header(
    path: &Path,
    bytes: &[u8],
    newest: bool,
) -> Result<Option<SegmentContents>, WalError> {
    let header_len = HEADER_LEN as usize;
    if bytes.len() < header_len || &bytes[..MAGIC.len()] != MAGIC {
        // The header is written and synced before any frame: a short one is a segment whose
        // creation a crash interrupted, with nothing in it.
        if newest && bytes.len() < header_len && MAGIC.starts_with(&bytes[..bytes.len().min(12)]) {
            return Ok(Some(SegmentContents {
                frames: Vec::new(),
                torn_at: Some(0),
                end: 0,
            }));
        }
        return Err(WalError::NotASegment {
            path: path.to_owned(),
        });
    }
    let version = u32::from_le_bytes(read_array(&bytes[MAGIC.len()..header_len]));
    if version != FORMAT_VERSION {
        return Err(WalError::Version {
            path: path.to_owned(),
            version,
        });
    }
    Ok(None)
}

/// What [`read_frame`] found at an offset.
enum FrameRead {
    /// A frame whose checksum matches: its records and its length with its header.
    Whole { writes: Vec<Write>, len: usize },
    /// The torn tail of the newest segment.
    Torn,
    /// The end of the log: nothing but zeros from here.
    End,
}

/// Reads the frame at `offset`. A torn frame ends the newest segment and is damage in any
/// other.
fn read_frame(
    path: &Path,
    bytes: &[u8],
    offset: usize,
    newest: bool,
) -> Result<FrameRead, WalError> {
    let damaged = |what: &'static str| WalError::Damaged {
        path: path.to_owned(),
        offset,
        what,
    };
    let torn = |what: &'static str| {
        if newest {
            Ok(FrameRead::Torn)
        } else {
            Err(damaged(what))
        }
    };
    let rest = &bytes[offset..];
    let header = &rest[..rest.len().min(FRAME_HEADER_LEN)];
    if unwritten(header) {
        // No frame is all zeros (the checksum of an empty body is not 0): this is where the
        // log ends, in the zeros written ahead of it. Bytes after it are a frame whose start
        // a crash kept from the disk.
        return if unwritten(rest) {
            Ok(FrameRead::End)
        } else {
            torn("a frame after the end of the log")
        };
    }
    if rest.len() < FRAME_HEADER_LEN {
        return torn("a short frame header");
    }
    let body_len = u32::from_le_bytes(read_array(&rest[..4])) as usize;
    let checksum = u64::from_le_bytes(read_array(&rest[4..FRAME_HEADER_LEN]));
    if body_len > MAX_FRAME_BODY || rest.len() - FRAME_HEADER_LEN < body_len {
        return torn("a frame longer than the file");
    }
    let body = &rest[FRAME_HEADER_LEN..FRAME_HEADER_LEN + body_len];
    if xxhash_rust::xxh3::xxh3_64(body) != checksum {
        // Frames are synced one at a time, so only the last one can be torn; a bad frame
        // with frames after it is damage.
        if !unwritten(&rest[FRAME_HEADER_LEN + body_len..]) {
            return Err(damaged("a checksum mismatch before the last frame"));
        }
        return torn("a checksum mismatch");
    }
    let writes = decode_body(body).map_err(|what| WalError::Malformed {
        path: path.to_owned(),
        offset,
        what,
    })?;
    Ok(FrameRead::Whole {
        writes,
        len: FRAME_HEADER_LEN + body_len,
    })
}

/// Whether `bytes` are all zeros: never written, past the end of the log.
fn unwritten(bytes: &[u8]) -> bool {
    bytes.iter().all(|&byte| byte == 0)
}

fn read_array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut array = [0; N];
    array.copy_from_slice(&bytes[..N]);
    array
}

fn decode_body(mut body: &[u8]) -> Result<Vec<Write>, String> {
    let mut writes = Vec::new();
    while let Some((&tag, rest)) = body.split_first() {
        body = rest;
        let key = take(&mut body, 2)?;
        let value = match tag {
            TAG_CONFIG | TAG_STATE | TAG_TICKET_PUT | TAG_SESSION_PUT | TAG_EVENT => {
                Some(take(&mut body, 4)?)
            }
            TAG_TICKET_DELETE | TAG_SESSION_DELETE | TAG_DELETE_ROOM => None,
            other => return Err(format!("an unknown record tag {other}")),
        };
        let room = || {
            std::str::from_utf8(key)
                .ok()
                .and_then(|text| RoomId::new(text).ok())
                .ok_or_else(|| format!("an invalid room id {key:?}"))
        };
        let value = value.map(<[u8]>::to_vec);
        writes.push(match (tag, value) {
            (TAG_CONFIG, Some(bytes)) => Write::Config {
                room: room()?,
                bytes,
            },
            (TAG_STATE, Some(bytes)) => Write::State {
                room: room()?,
                bytes,
            },
            (TAG_TICKET_PUT | TAG_TICKET_DELETE, bytes) => Write::Ticket {
                key: key.to_vec(),
                bytes,
            },
            (TAG_SESSION_PUT | TAG_SESSION_DELETE, bytes) => Write::Session {
                key: key.to_vec(),
                bytes,
            },
            (TAG_EVENT, Some(payload)) => Write::Event {
                sequence: u64::from_le_bytes(
                    key.try_into()
                        .map_err(|_| "an event key that is not 8 bytes".to_owned())?,
                ),
                payload,
            },
            _ => Write::DeleteRoom { room: room()? },
        });
    }
    Ok(writes)
}

/// Takes a length-prefixed field (`width` bytes of little-endian length) off the front.
fn take<'a>(body: &mut &'a [u8], width: usize) -> Result<&'a [u8], String> {
    if body.len() < width {
        return Err("a truncated record".to_owned());
    }
    let mut length = [0u8; 8];
    length[..width].copy_from_slice(&body[..width]);
    let length = usize::try_from(u64::from_le_bytes(length)).unwrap_or(usize::MAX);
    let rest = &body[width..];
    if rest.len() < length {
        return Err("a truncated record".to_owned());
    }
    let (field, rest) = rest.split_at(length);
    *body = rest;
    Ok(field)
}
