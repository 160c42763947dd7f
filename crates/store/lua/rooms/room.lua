-- The room engine of anteroom-core (crates/core/src/engine/mod.rs), in Lua, over one room's
-- keys. This file is the shared prelude of the room library (redis_store/scripts.rs): Redis
-- runs it once when it loads the library, and every operation is a function of the library
-- (its own file as the body), so each operation is still one call (one FCALL) and runs
-- atomically on the room's slot.
--
-- KEYS (all carry the hash tag {room}, so a room lives in one Cluster slot):
--   1 meta        hash   configuration (as numbers), counters, admission bucket, measured
--                        admission rate (decayed admissions and seconds), totals, and the
--                        origin's latest load signal (`signal`, put_signal.lua)
--   2 tickets     hash   ticket id -> ticket record, for tickets no longer waiting
--   3 waiting     hash   the regular line's count tree (`ahead` exactly, the n-th ticket) and
--                        the id index's state (see "The waiting line" below)
--   4 line        prefix of the waiting tickets' keys: `<line>:<n>` is a hash from position
--                        to the ticket's id and waiting record for the positions n*128 ..
--                        n*128+127, so it stays a small listpack-encoded hash (see LINE_BUCKET
--                        below); `<line>:id:<n>` are the id index's buckets (id -> position)
--   5 admitted    zset   admitted, unclaimed ticket ids by claim deadline
--   6 sessions    hash   session id -> session record
--   7 active      zset   active session ids by expiry
--   8 identities  hash   identity -> ticket id (identity rooms)
--   9 ended       zset   ended ticket ids by end time (forgotten after the retention)
--  10 forget      zset   ended session ids by the time they may be forgotten
--  11 priority    hash   the priority lane's count tree (SPEC §12: its tickets are admitted
--                        before the regular line's)
--  12 session_ids zset   every remembered session id, all scored 0: ordered by id, for
--                        bounded admin listings (ZRANGE BYLEX)
--  13 cancelled   zset   ids of joins the caller gave up on (cancel_join.lua) by the time they
--                        may be forgotten: a join arriving later with one of them is refused
--  14 outbox      stream the room's events for the sinks (SPEC §14.9), entry ids `<sequence>-1`,
--                        one field `e` (the event JSON), at most the cap; kept when the room
--                        is deleted, until the sinks have delivered it
--  15 outbox_seq  string the last sequence of `outbox` (never reset)
-- ARGV[1] the time in milliseconds, or '' to read the server's TIME (production)
-- ARGV[2] the room's shard channel for change notices
-- ARGV[3] how long ended tickets and sessions are kept in a room stored without its own
--   `retention` (the default history_retention), in milliseconds
-- ARGV[4] '' while events are off, or `<cap>|<24 hex digits>|<room id>` (see emit below)
-- ARGV[5...] the operation's own arguments
--
-- Ticket record: state|position|generation|joined_at|last_seen|x|y|identity|return_to[|p]
--   (a tenth field `p` marks a ticket of the priority lane). This is the record of a ticket
--   that no longer waits, and the form every answer carries.
-- Waiting record (layouts 2 and 3): joined_at|seen|identity|return_to[|p], kept under the
--   ticket's position in its line bucket after the ticket's id and a `|` (layout 3); `seen` is
--   the last contact minus joined_at, the position is the field, the generation is the room's
--   (a reset ends every waiting ticket). A waiting ticket is thus a short listpack entry in its
--   line bucket, one in the id index and a count in its lane's tree. The meta field
--   `seen_floor` is the last time a store opened (reopen.lua): every waiting ticket counts as
--   seen then.
--   state w (waiting), a (admitted: x = at, y = claim deadline), c (claimed: x = session id),
--   e (ended: x = at, y = reason). identity and return_to are '' (none) or '=' followed by
--   the text with '%' and '|' percent-escaped (done by the caller, never here).
-- Session record: state|ticket|position|generation|issued_at|renewed_at|expires_at|
--   hard_expires_at|ended_at|reason|uid
--   state a (active) or e (ended); ticket, hard_expires_at, ended_at, reason may be ''.
-- These records' columns are read and written by `ticket_from_columns`, `ticket_record`,
--   `waiting_from_columns`, `waiting_record`, `session_from_columns` and `session_record`,
--   which the store writes in front of this prelude from its field lists (one per record),
--   numbers with `int` (below).
--
-- Meta also holds the schedule (SPEC §5.3), written by put_room: `schedule` is '' or events
-- joined by ';', each `prequeue_at,opens_at,closes_at,shuffle,max_active,per_minute,capacity`
-- (times in ms, shuffle 0/1, an absent override ''), `before` and `after` are passthrough or
-- closed; and the latest pre-queue lottery, `draw` = `opens_at|drawn_at|seed|cohort|through`.
-- load_room applies the schedule: `room.mode`, `max_active`, `per_minute` and `capacity` are
-- the values in force at NOW (RoomConfig::mode_at, limits_at), `room.config_mode` the
-- operator's mode.
--
-- Every integer stays below 2^53, so Lua's doubles hold them exactly.

-- A call's keys and arguments, and what the prelude reads from them: set by begin_call (at the
-- end of this file) at the start of every call, before the operation's own code runs.
local KEYS, ARGV
local META, TICKETS, WAITING, LINE, ADMITTED
local SESSIONS, ACTIVE, IDENTITIES, ENDED, FORGET
local PRIORITY
local SESSION_IDS
local CANCELLED
local OUTBOX, OUTBOX_SEQUENCE
local CHANNEL
local DEFAULT_RETENTION

-- Admission bucket units per token (one minute in milliseconds), as in engine/bucket.rs.
local UNITS_PER_TOKEN = 60000
-- Time constant of the admission-rate average, as in eta.rs.
local RATE_TIME_CONSTANT_SECS = 120.0

-- The layout this prelude reads and writes (meta `layout`). Layouts 1 and 2 kept each lane as
-- a zset of ids by position, layout 1 its waiting records in `tickets` and last contacts in a
-- zset `idle`; they are migrated on first use (migrate_line).
local LAYOUT = '3'
-- Positions per line bucket: at most 128 entries, Redis's default hash-max-listpack-entries,
-- so a bucket stays listpack-encoded as long as its records are under 64 bytes
-- (hash-max-listpack-value; a long identity or return path turns its bucket into a hashtable).
local LINE_BUCKET = 128
-- Waiting records a tick examines for idleness (sweep_idle), plus at most one bucket more.
local SWEEP_BUDGET = 1024

-- The call's time in milliseconds (begin_call).
local NOW

-- Whole numbers' texts, kept from call to call (at most TEXTS_KEPT, then started again):
-- formatting a number is among the costlier steps of a call, and a call formats the same ones
-- over and over (the time, the generation, bucket and tree node numbers, positions).
local TEXTS_KEPT = 4096
local int_text, int_texts = {}, 0

-- A whole number's text. `%d` formats a C integer, several times cheaper for Redis than `%.0f`
-- (the C library's floating-point printing); a number that is not whole (or not finite) keeps
-- the rounding of `%.0f`. (Declared in front of this prelude, with the record functions that
-- use it.)
int = function(number)
  local text = int_text[number]
  if text ~= nil then
    return text
  end
  if number % 1 ~= 0 then
    return string.format('%.0f', number)
  end
  text = string.format('%d', number)
  if int_texts == TEXTS_KEPT then
    int_text, int_texts = {}, 0
  end
  int_text[number], int_texts = text, int_texts + 1
  return text
end

-- The texts of the numbers `float` formatted lately, kept from call to call (at most
-- FLOAT_TEXTS, then started again): the rates it formats change only when tickets are
-- admitted, and every status answer carries them.
local FLOAT_TEXTS = 16
local float_text, float_texts = {}, 0
local function float(number)
  local text = float_text[number]
  if text == nil then
    text = string.format('%.17g', number)
    -- (NaN is no table key.)
    if number == number then
      if float_texts == FLOAT_TEXTS then
        float_text, float_texts = {}, 0
      end
      float_text[number], float_texts = text, float_texts + 1
    end
  end
  return text
end

local function optional_int(number)
  if number == nil then
    return ''
  end
  return int(number)
end

local function optional_number(text)
  if text == nil or text == false or text == '' then
    return nil
  end
  return tonumber(text)
end

local function split(record)
  local fields = {}
  for field in string.gmatch(record .. '|', '([^|]*)|') do
    fields[#fields + 1] = field
  end
  return fields
end

-- The waiting line (layout 3) ---------------------------------------------------------------
-- A waiting ticket is held in three compact places, none of them a structure per ticket:
-- - its record under its position in its line bucket `<line>:<position / LINE_BUCKET>`, the
--   ticket's id first (`encode_waiting`), so the id for a position is one HGET;
-- - its id in the id index, listpack hashes `<line>:id:<n>` from id to position, the ids spread
--   over the buckets by linear hashing on their SHA-1 (`index_key`): a bucket is split in two
--   whenever the room holds more than INDEX_LOAD ids per bucket, so the position for an id is
--   one HGET whatever the line's length, and no bucket outgrows a listpack;
-- - a bit in its lane's count hash (`waiting` for the regular line, `priority` for the
--   priority lane): `m<n>` is the mask of the lane's live positions in line bucket n (16
--   bytes, position n*128 + k being bit k % 8 of byte k / 8 + 1; deleted when empty), and the
--   fields `<node>` are a Fenwick tree over the line buckets (leaf n + 1 counts bucket n's
--   live tickets; a node at zero is deleted), and `hashtable` (see HASHTABLE_MARK).
-- The room's meta keeps each lane's total and its tree's size in leaves (`waiting_n`,
-- `waiting_size`, `priority_n`, `priority_size`; the size a power of two, doubled when a bucket
-- beyond it comes) and the id index's state (`index_level`, `index_split`), so they are read
-- and written with the rest of the meta.
-- `ahead` is the tree's prefix sum before the ticket's bucket and the bits below it in its
-- mask: one HMGET of about log2(size) + 1 fields of a hash whose lookups are O(1); the n-th
-- ticket of a lane is found by descending the tree, then in its bucket's mask.
-- Changes to masks and counts gather during a call and are written once (flush_counts), before
-- any count is read and when the call saves the room: a batch of joins writes its lane once.

-- Ids per index bucket, on average, before one more bucket is split off: an unsplit bucket
-- then holds at most about twice that, still under the 128 entries of a listpack.
local INDEX_LOAD = 50
-- Bytes of a bucket's mask.
local MASK_BYTES = LINE_BUCKET / 8
-- A count hash's field `hashtable` holds a value longer than hash-max-listpack-value (64), so
-- Redis keeps the hash a hashtable from its first write: its fields are read and written a few
-- at a time, and each lookup in a listpack scans it (a short line's hash would be one).
-- (65 characters: `string` is not at hand while the library loads.)
local HASHTABLE_MARK = 'hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh'

-- The number of set bits of each byte value (made when the library loads, where `math` is
-- not at hand).
local BITS_SET = { [0] = 0 }
for value = 1, 255 do
  BITS_SET[value] = BITS_SET[(value - value % 2) / 2] + value % 2
end

-- The meta fields holding each lane's total and tree size and the id index's state, read with
-- the room's meta (load_room) and written with it (save_room).
local LANE_FIELDS = {
  'waiting_n', 'waiting_size', 'priority_n', 'priority_size', 'index_level', 'index_split',
}

-- The lanes this call read, by key: { n, size, stored_n, dirty } and, once a count changes,
-- pending = { leaf = delta }, masks = { bucket = bytes }, changed_masks = { bucket = true };
-- and the id index's { level, split, dirty }. begin_call forgets them. (A call that changes
-- no count makes no more tables than these: every table is work for Lua's collector.)
local lanes, index_state = nil, nil

local function new_lane(n, size)
  n = tonumber(n or '0')
  return { n = n, stored_n = n, size = tonumber(size or '1'), dirty = false }
end

-- Takes the lanes' state from the values of LANE_FIELDS at values[first ...].
local function load_lanes(values, first)
  lanes = {
    [WAITING] = new_lane(values[first], values[first + 1]),
    [PRIORITY] = new_lane(values[first + 2], values[first + 3]),
  }
  index_state = { level = tonumber(values[first + 4] or '0'),
    split = tonumber(values[first + 5] or '0') }
end

local function lane_state(key)
  if lanes == nil then
    load_lanes(redis.call('HMGET', META, unpack(LANE_FIELDS)), 1)
  end
  return lanes[key]
end

local function lane_name(key)
  if key == PRIORITY then
    return 'priority'
  end
  return 'waiting'
end

-- The live tickets of a lane (its pending changes included).
local function lane_count(key)
  return lane_state(key).n
end

local function line_bucket(position)
  return math.floor(position / LINE_BUCKET)
end

local function bucket_key(position)
  return LINE .. ':' .. int(line_bucket(position))
end

local function mask_bytes(text)
  if not text then
    local bytes = {}
    for i = 1, MASK_BYTES do
      bytes[i] = 0
    end
    return bytes
  end
  return { string.byte(text, 1, MASK_BYTES) }
end

local function low_bit(i)
  local value = 1
  while i % (value * 2) == 0 do
    value = value * 2
  end
  return value
end

-- Sets (delta 1) or clears (delta -1) a position's bit in its lane's mask; counts only a bit
-- that changes.
local function count_add(key, position, delta)
  local state = lane_state(key)
  if not state.dirty then
    state.pending, state.masks, state.changed_masks = {}, state.masks or {}, {}
  end
  local bucket = line_bucket(position)
  local bytes = state.masks[bucket]
  if bytes == nil then
    bytes = mask_bytes(redis.call('HGET', key, 'm' .. int(bucket)))
    state.masks[bucket] = bytes
  end
  local offset = position - bucket * LINE_BUCKET
  local byte = math.floor(offset / 8) + 1
  local flag = 2 ^ (offset % 8)
  local set = math.floor(bytes[byte] / flag) % 2 == 1
  if set == (delta > 0) then
    return
  end
  bytes[byte] = bytes[byte] + delta * flag
  state.changed_masks[bucket] = true
  state.pending[bucket + 1] = (state.pending[bucket + 1] or 0) + delta
  state.n = state.n + delta
  state.dirty = true
end

-- The node changes of a lane's pending counts, the tree grown first to hold every leaf: a
-- new root 2 * size covers the whole tree so far, so it starts at the stored total.
local function node_changes(state)
  local changes, size = {}, state.size
  for leaf in pairs(state.pending) do
    while leaf > size do
      size = size * 2
      changes[size] = (changes[size] or 0) + state.stored_n
    end
  end
  for leaf, delta in pairs(state.pending) do
    local node = leaf
    while node <= size do
      changes[node] = (changes[node] or 0) + delta
      node = node + low_bit(node)
    end
  end
  return changes, size
end

-- The writes of a lane's changed masks: fields to set, and those of empty masks to delete.
local function mask_writes(state, writes, zeros)
  for bucket in pairs(state.changed_masks) do
    local bytes = state.masks[bucket]
    local empty = true
    for i = 1, MASK_BYTES do
      empty = empty and bytes[i] == 0
    end
    if empty then
      zeros[#zeros + 1] = 'm' .. int(bucket)
    else
      writes[#writes + 1] = 'm' .. int(bucket)
      writes[#writes + 1] = string.char(unpack(bytes))
    end
  end
end

-- Writes a lane's pending changes: one HMGET of the nodes they touch, one HSET, one HDEL.
local function flush_lane(key, state)
  local changes, size = node_changes(state)
  local writes, zeros = {}, {}
  if state.stored_n == 0 then
    writes[1], writes[2] = 'hashtable', HASHTABLE_MARK
  end
  mask_writes(state, writes, zeros)
  local fields = {}
  for node in pairs(changes) do
    fields[#fields + 1] = int(node)
  end
  if #fields > 0 then
    local old = redis.call('HMGET', key, unpack(fields))
    for i, field in ipairs(fields) do
      local value = tonumber(old[i] or '0') + changes[tonumber(field)]
      if value == 0 then
        zeros[#zeros + 1] = field
      else
        writes[#writes + 1] = field
        writes[#writes + 1] = int(value)
      end
    end
  end
  if #writes > 0 then
    redis.call('HSET', key, unpack(writes))
  end
  if #zeros > 0 then
    redis.call('HDEL', key, unpack(zeros))
  end
  state.size, state.stored_n, state.dirty = size, state.n, false
end

-- Writes every pending change. The lanes' totals and sizes and the id index's state go to
-- the room's meta: appended to `meta_writes` when given (save_room's HSET), else set here.
local function flush_counts(meta_writes)
  if lanes == nil then
    return
  end
  local writes = meta_writes or {}
  local first = #writes
  for key, state in pairs(lanes) do
    if state.dirty then
      flush_lane(key, state)
      local name = lane_name(key)
      writes[#writes + 1] = name .. '_n'
      writes[#writes + 1] = int(state.n)
      writes[#writes + 1] = name .. '_size'
      writes[#writes + 1] = int(state.size)
    end
  end
  if index_state.dirty then
    writes[#writes + 1] = 'index_level'
    writes[#writes + 1] = int(index_state.level)
    writes[#writes + 1] = 'index_split'
    writes[#writes + 1] = int(index_state.split)
    index_state.dirty = false
  end
  if meta_writes == nil and #writes > first then
    redis.call('HSET', META, unpack(writes))
  end
end

-- The tree's nodes whose sum is the count of leaves 1 .. leaf.
local function prefix_nodes(key, leaf)
  local fields = {}
  local node = math.min(leaf, lane_state(key).size)
  while node > 0 do
    fields[#fields + 1] = int(node)
    node = node - low_bit(node)
  end
  return fields
end

local function sum(values, first, last)
  local total = 0
  for i = first, last do
    total = total + tonumber(values[i] or '0')
  end
  return total
end

-- The leaf holding a lane's rank-th live ticket (1 <= rank <= its count), and that ticket's
-- rank within the leaf: the tree's descent, one HGET a level. Nil when the tree holds fewer
-- (counts that disagree with the tree must not send a caller past the line's end forever).
local function leaf_of_rank(key, rank)
  flush_counts()
  local size = lane_state(key).size
  local leaf, step = 0, size
  while step >= 1 do
    local node = leaf + step
    if node <= size then
      local count = tonumber(redis.call('HGET', key, int(node)) or '0')
      if count < rank then
        leaf, rank = node, rank - count
      end
    end
    step = step / 2
  end
  if leaf + 1 > size then
    return nil
  end
  return leaf + 1, rank
end

-- The lane a line bucket's value belongs to: a priority ticket's record ends in `|p`.
local function lane_of_value(value)
  if string.sub(value, -2) == '|p' then
    return PRIORITY
  end
  return WAITING
end

-- The lane's rank-th live ticket: its position and its bucket value.
local function nth_in_lane(key, rank)
  local leaf, within = leaf_of_rank(key, rank)
  if leaf == nil then
    error('anteroom: the counts of ' .. key .. ' disagree with its tree')
  end
  local bucket = leaf - 1
  local bytes = mask_bytes(redis.call('HGET', key, 'm' .. int(bucket)))
  for byte = 1, MASK_BYTES do
    local value = bytes[byte]
    if BITS_SET[value] < within then
      within = within - BITS_SET[value]
    else
      for offset = 0, 7 do
        if math.floor(value / 2 ^ offset) % 2 == 1 then
          within = within - 1
          if within == 0 then
            local position = bucket * LINE_BUCKET + (byte - 1) * 8 + offset
            return position, redis.call('HGET', bucket_key(position), int(position))
          end
        end
      end
    end
  end
  error('anteroom: the counts of ' .. key .. ' disagree with its masks')
end

-- The live tickets of a lane before `position` (`ahead`, exact: I5): the tree's count of the
-- buckets before its own and the bits below it in its bucket's mask, in one HMGET.
local function ahead_in_lane(key, position)
  flush_counts()
  local bucket = line_bucket(position)
  local fields = prefix_nodes(key, bucket)
  fields[#fields + 1] = 'm' .. int(bucket)
  local values = redis.call('HMGET', key, unpack(fields))
  local ahead = sum(values, 1, #fields - 1)
  local mask = values[#fields]
  if not mask then
    return ahead
  end
  local offset = position - bucket * LINE_BUCKET
  local byte = math.floor(offset / 8) + 1
  -- (the mask's bytes up to the position's in one call)
  local bytes = { string.byte(mask, 1, byte) }
  for i = 1, byte - 1 do
    ahead = ahead + BITS_SET[bytes[i]]
  end
  return ahead + BITS_SET[bytes[byte] % 2 ^ (offset % 8)]
end

-- The live tickets of a lane in its buckets 0 .. bucket - 1.
local function count_before_bucket(key, bucket)
  flush_counts()
  local fields = prefix_nodes(key, bucket)
  if #fields == 0 then
    return 0
  end
  return sum(redis.call('HMGET', key, unpack(fields)), 1, #fields)
end

-- The id index ----------------------------------------------------------------------------

local function id_hash(id)
  return tonumber(string.sub(redis.sha1hex(id), 1, 8), 16)
end

local function index_key(bucket)
  return LINE .. ':id:' .. int(bucket)
end

-- The index bucket key of an id (linear hashing): buckets below the split point have been
-- split and address by one bit more.
local function index_key_of(id)
  lane_state(WAITING)
  local hash = id_hash(id)
  local low = 2 ^ index_state.level
  local bucket = hash % low
  if bucket < index_state.split then
    bucket = hash % (low * 2)
  end
  return index_key(bucket)
end

-- The index's buckets: 0 .. index_buckets() - 1.
local function index_buckets()
  lane_state(WAITING)
  return 2 ^ index_state.level + index_state.split
end

-- The position of a waiting ticket's id, and the index bucket holding it.
local function index_position(id)
  local key = index_key_of(id)
  return tonumber(redis.call('HGET', key, id)), key
end

local function index_set(id, position)
  redis.call('HSET', index_key_of(id), id, int(position))
end

-- Splits the next index bucket in two: its ids whose hash has the next bit set move to the
-- bucket 2^level above it.
local function split_index_bucket()
  local low = 2 ^ index_state.level
  local from = index_state.split
  local entries = redis.call('HGETALL', index_key(from))
  local moved, gone = {}, {}
  for i = 1, #entries, 2 do
    if id_hash(entries[i]) % (low * 2) ~= from then
      moved[#moved + 1] = entries[i]
      moved[#moved + 1] = entries[i + 1]
      gone[#gone + 1] = entries[i]
    end
  end
  if #gone > 0 then
    redis.call('HSET', index_key(from + low), unpack(moved))
    redis.call('HDEL', index_key(from), unpack(gone))
  end
  index_state.split = from + 1
  if index_state.split == low then
    index_state.level, index_state.split = index_state.level + 1, 0
  end
  index_state.dirty = true
end

-- Keeps the index at INDEX_LOAD ids a bucket; an empty line starts it again from one bucket.
local function fit_index()
  local ids = lane_count(WAITING) + lane_count(PRIORITY)
  if ids == 0 then
    if index_state.level ~= 0 or index_state.split ~= 0 then
      index_state.level, index_state.split, index_state.dirty = 0, 0, true
    end
    return
  end
  if ids > INDEX_LOAD * index_buckets() then
    split_index_bucket()
  end
end

-- A waiting ticket joins its lane at `position`.
local function enter_lane(key, id, position)
  index_set(id, position)
  count_add(key, position, 1)
  fit_index()
end

-- A waiting ticket leaves its lane (`ticket.index_key` is its index bucket when get_ticket
-- found it there).
local function leave_lane(key, ticket)
  redis.call('HDEL', ticket.index_key or index_key_of(ticket.id), ticket.id)
  count_add(key, ticket.position, -1)
  fit_index()
end

-- Calls visit(position, value) for every waiting ticket of both lanes, bucket by bucket in
-- position order from the first live one to `last_position` (whole-room operations only).
local function each_waiting(last_position, visit)
  local first = nil
  for _, key in ipairs({ WAITING, PRIORITY }) do
    if lane_count(key) > 0 then
      local position = nth_in_lane(key, 1)
      first = math.min(first or position, position)
    end
  end
  if first == nil then
    return
  end
  for bucket = math.floor(first / LINE_BUCKET), math.floor(last_position / LINE_BUCKET) do
    local entries = redis.call('HGETALL', LINE .. ':' .. int(bucket))
    local positions, values = {}, {}
    for i = 1, #entries, 2 do
      local position = tonumber(entries[i])
      positions[#positions + 1] = position
      values[position] = entries[i + 1]
    end
    table.sort(positions)
    for _, position in ipairs(positions) do
      visit(position, values[position])
    end
  end
end

-- The room ----------------------------------------------------------------------------------

-- The configuration's fields, written only by put_room, together with the configuration's
-- text (`config`).
local CONFIG_FIELDS = {
  'mode', 'order', 'max_active', 'per_minute', 'capacity', 'session_ttl', 'session_max',
  'claim_ttl', 'idle_ttl', 'renew_after', 'schedule', 'before', 'after', 'retention',
}
local STATE_FIELDS = {
  'generation', 'last_position', 'serving', 'units', 'units_at', 'rate_admissions',
  'rate_seconds', 'rate_at', 'draw', 'config',
}
-- TOTAL_FIELDS, the room's totals (meta fields, and their order in snapshot_reply), and
-- TICK_REPORT_FIELDS, what a tick did (tick.lua's answer), are defined in front of this prelude
-- by the store from the Rust records' field lists (scripts.rs).

local room = nil

-- Defined with the tickets below; the room's loaders call it for a room in layout 1 or 2.
local migrate_line

-- Brings a room's layout (its meta field `layout`) to this prelude's; refuses one it does not
-- know with an error naming the key, rather than misreading it.
local function check_layout(layout)
  if layout == LAYOUT then
    return
  end
  if layout == '1' or layout == '2' then
    migrate_line(layout)
    return
  end
  error('anteroom: ' .. META .. ' has layout ' .. tostring(layout)
    .. ', which this version of anteroom does not know')
end

-- Whether the room exists, for scripts that do not load it (migrating it if needed).
local function room_exists()
  local layout = redis.call('HGET', META, 'layout')
  if not layout then
    return false
  end
  check_layout(layout)
  return true
end

-- The lottery seed an operation may use (64 hex digits), set by the scripts that settle.
local DRAW_SEED = nil

local function parse_schedule(text)
  local events = {}
  if text == nil or text == false or text == '' then
    return events
  end
  for entry in string.gmatch(text, '([^;]+)') do
    local f = {}
    for field in string.gmatch(entry .. ',', '([^,]*),') do
      f[#f + 1] = field
    end
    events[#events + 1] = {
      prequeue_at = tonumber(f[1]),
      opens_at = tonumber(f[2]),
      closes_at = tonumber(f[3]),
      shuffle = f[4] == '1',
      max_active = optional_number(f[5]),
      per_minute = optional_number(f[6]),
      capacity = optional_number(f[7]),
    }
  end
  return events
end

-- Puts the schedule's mode and limits at NOW in force (RoomConfig::phase, mode_at,
-- limits_at): the first event that has not closed decides.
local function apply_schedule()
  room.mode = room.config_mode
  room.max_active = room.base_max_active
  room.per_minute = room.base_per_minute
  room.capacity = room.base_capacity
  room.opens_at = nil
  room.open_event = nil
  if room.config_mode ~= 'queue' or #room.events == 0 then
    return
  end
  for _, event in ipairs(room.events) do
    if NOW < event.closes_at then
      if NOW < event.prequeue_at then
        room.mode = room.before
      elseif NOW < event.opens_at then
        room.mode = 'queue_all'
        room.opens_at = event.opens_at
      else
        room.open_event = event
        room.max_active = event.max_active or room.max_active
        room.per_minute = event.per_minute or room.per_minute
        room.capacity = event.capacity or room.capacity
      end
      return
    end
  end
  room.mode = room.after
end

-- The meta fields load_room reads, made once when the library loads (where `ipairs` is not at
-- hand); the lanes' fields last, after ROOM_LANE_VALUES others.
local ROOM_FIELDS = {}
local ROOM_LANE_VALUES = nil
local ROOM_FIELD_LISTS = {
  STATE_FIELDS, { 'layout', 'seen_floor' }, LANE_FIELDS,
}
for l = 1, #ROOM_FIELD_LISTS do
  local list = ROOM_FIELD_LISTS[l]
  if list == LANE_FIELDS then
    ROOM_LANE_VALUES = #ROOM_FIELDS
  end
  for i = 1, #list do ROOM_FIELDS[#ROOM_FIELDS + 1] = list[i] end
end

-- ROOM_FIELDS and then the totals, for the operations that change or report totals.
local ROOM_AND_TOTAL_FIELDS = {}
for i = 1, #ROOM_FIELDS do ROOM_AND_TOTAL_FIELDS[i] = ROOM_FIELDS[i] end
for i = 1, #TOTAL_FIELDS do ROOM_AND_TOTAL_FIELDS[#ROOM_FIELDS + i] = TOTAL_FIELDS[i] end

-- Where each of ROOM_FIELDS is in load_room's HMGET answer.
local ROOM_FIELD_AT = {}
for i = 1, #ROOM_FIELDS do
  ROOM_FIELD_AT[ROOM_FIELDS[i]] = i
end

-- Sets the room's totals from values[first ...] (TOTAL_FIELDS' order).
local function set_totals(loaded, values, first)
  for i, total in ipairs(TOTAL_FIELDS) do
    -- (a total added since the room was written starts at zero)
    rawset(loaded, total, tonumber(values[first + i - 1] or '0'))
  end
  loaded.totals_read = true
end

-- The room's totals are read when one is first used if load_room did not read them (a status
-- of a waiting ticket uses none): `room` looks a missing total up here, which reads them all.
local IS_TOTAL = {}
for i = 1, #TOTAL_FIELDS do
  IS_TOTAL[TOTAL_FIELDS[i]] = true
end
local LAZY_TOTALS = {
  __index = function(loaded, name)
    if not IS_TOTAL[name] or loaded.totals_read then
      return nil
    end
    set_totals(loaded, redis.call('HMGET', META, unpack(TOTAL_FIELDS)), 1)
    return rawget(loaded, name)
  end,
}

-- Rooms' configurations as read (room_config), by meta key, kept from call to call (at most
-- CONFIGS_KEPT, then started again) with the configuration's text they were read with.
local CONFIGS_KEPT = 64
local configs, configs_kept = {}, 0

-- The room's configuration: the one kept while the stored configuration's text (`text`,
-- false for none) is the one it was read with, else read from meta. put_room writes the text
-- with the fields in one HSET, so the same text means the same fields.
local function room_config(text)
  local config = configs[META]
  if config and text and config.text == text then
    return config
  end
  local values = redis.call('HMGET', META, unpack(CONFIG_FIELDS))
  config = {
    text = text,
    mode = values[1],
    order = values[2],
    max_active = tonumber(values[3]),
    per_minute = tonumber(values[4]),
    capacity = tonumber(values[5]),
    session_ttl = tonumber(values[6]),
    session_max = optional_number(values[7]),
    claim_ttl = tonumber(values[8]),
    idle_ttl = tonumber(values[9]),
    renew_after = tonumber(values[10]),
    events = parse_schedule(values[11]),
    before = values[12] or 'passthrough',
    after = values[13] or 'passthrough',
    retention = optional_number(values[14]),
  }
  if text then
    if configs_kept == CONFIGS_KEPT then
      configs, configs_kept = {}, 0
    end
    configs[META], configs_kept = config, configs_kept + 1
  end
  return config
end

-- Loads the room's meta hash into `room`, its totals too when `with_totals` (else on first
-- use); false when the room does not exist. The room is made by one table constructor, which
-- sizes the table for its fields at once (a table filled field by field is rebuilt each time
-- it outgrows its size).
local function load_room(with_totals)
  local values = redis.call('HMGET', META,
    unpack(with_totals and ROOM_AND_TOTAL_FIELDS or ROOM_FIELDS))
  local at = ROOM_FIELD_AT
  if not values[at.generation] then
    return false
  end
  check_layout(values[at.layout])
  -- (A room just migrated has its lanes' state from the migration.)
  if lanes == nil then
    load_lanes(values, ROOM_LANE_VALUES + 1)
  end
  local config = room_config(values[at.config])
  local draw = values[at.draw] or ''
  room = {
    config_mode = config.mode,
    order = config.order,
    changed = false,
    events = config.events,
    before = config.before,
    after = config.after,
    base_max_active = config.max_active,
    base_per_minute = config.per_minute,
    base_capacity = config.capacity,
    session_ttl = config.session_ttl,
    claim_ttl = config.claim_ttl,
    idle_ttl = config.idle_ttl,
    renew_after = config.renew_after,
    generation = tonumber(values[at.generation]),
    last_position = tonumber(values[at.last_position]),
    serving = tonumber(values[at.serving]),
    units = tonumber(values[at.units]),
    units_at = tonumber(values[at.units_at]),
    draw = draw,
    seen_floor = tonumber(values[at.seen_floor] or '0'),
    draw_opens_at = optional_number(string.match(draw, '^(%d+)|')),
    session_max = config.session_max,
    retention = config.retention or DEFAULT_RETENTION,
    rate_admissions = tonumber(values[at.rate_admissions]),
    rate_seconds = tonumber(values[at.rate_seconds]),
    rate_at = optional_number(values[at.rate_at]),
    -- (set by apply_schedule)
    mode = false, max_active = false, per_minute = false, capacity = false,
    totals_read = false,
  }
  setmetatable(room, LAZY_TOTALS)
  if with_totals then
    set_totals(room, values, #ROOM_FIELDS + 1)
  end
  apply_schedule()
  return true
end

local function save_room()
  local values = {
    'generation', int(room.generation),
    'last_position', int(room.last_position),
    'serving', int(room.serving),
    'units', int(room.units),
    'units_at', int(room.units_at),
    'rate_admissions', float(room.rate_admissions),
    'rate_seconds', float(room.rate_seconds),
    'rate_at', optional_int(room.rate_at),
  }
  -- (totals never read are as stored; a new room's, put_room's, are all written)
  if room.totals_read ~= false then
    for _, name in ipairs(TOTAL_FIELDS) do
      values[#values + 1] = name
      values[#values + 1] = int(room[name])
    end
  end
  flush_counts(values)
  redis.call('HSET', META, unpack(values))
end

local function n_waiting()
  return lane_count(WAITING) + lane_count(PRIORITY)
end

-- The waiting line a ticket is in: the priority lane or the regular line.
local function line_of(ticket)
  if ticket.priority then
    return PRIORITY
  end
  return WAITING
end

-- Tells other nodes the room changed (a small notice; they re-read what they need).
-- `ended_session`, when given, is a session this operation ended: nodes refuse its pass.
local function notify(operation, ended_session)
  if room.changed then
    local fields = {
      operation, int(room.generation), int(room.serving), int(room.last_position),
      int(n_waiting()),
    }
    if ended_session then
      fields[#fields + 1] = ended_session
    end
    redis.call('SPUBLISH', CHANNEL, table.concat(fields, '|'))
  end
end

local function snapshot_reply(reply)
  reply[#reply + 1] = int(room.generation)
  reply[#reply + 1] = room.config_mode
  reply[#reply + 1] = int(room.serving)
  reply[#reply + 1] = int(room.last_position)
  reply[#reply + 1] = int(n_waiting())
  reply[#reply + 1] = int(redis.call('ZCARD', ACTIVE))
  reply[#reply + 1] = int(redis.call('ZCARD', ADMITTED))
  reply[#reply + 1] = float(room.rate_admissions)
  reply[#reply + 1] = float(room.rate_seconds)
  for _, name in ipairs(TOTAL_FIELDS) do
    reply[#reply + 1] = int(room[name])
  end
  reply[#reply + 1] = room.draw
  return reply
end

-- Admission bucket (engine/bucket.rs) -------------------------------------------------------

local function refill()
  local elapsed = NOW - room.units_at
  if elapsed < 0 then
    elapsed = 0
  end
  room.units = math.min(room.units + elapsed * room.per_minute, room.capacity)
  if NOW > room.units_at then
    room.units_at = NOW
  end
end

local function available()
  if room.per_minute == 0 then
    return math.huge
  end
  return math.floor(room.units / UNITS_PER_TOKEN)
end

local function spend(admissions)
  if room.per_minute ~= 0 then
    room.units = math.max(0, room.units - admissions * UNITS_PER_TOKEN)
  end
end

local function free_slots()
  if room.max_active == 0 then
    return math.huge
  end
  local held = redis.call('ZCARD', ACTIVE) + redis.call('ZCARD', ADMITTED)
  return math.max(0, room.max_active - held)
end

-- Admission rate (eta.rs: AdmissionRate::record): admissions and observed time, both decayed
-- exponentially; their ratio (computed by the caller, eta.rs) is the rate.

local function record_rate(admitted, had_demand)
  if room.rate_at == nil then
    room.rate_at = NOW
    return
  end
  if NOW <= room.rate_at then
    return
  end
  local since = room.rate_at
  room.rate_at = NOW
  if admitted == 0 and not had_demand then
    return
  end
  -- The same arithmetic as Duration::as_secs_f64 on whole milliseconds.
  local elapsed_ms = NOW - since
  local elapsed_secs = math.floor(elapsed_ms / 1000) + ((elapsed_ms % 1000) * 1000000) / 1e9
  local decay = math.exp(-elapsed_secs / RATE_TIME_CONSTANT_SECS)
  room.rate_admissions = room.rate_admissions * decay + admitted
  room.rate_seconds = room.rate_seconds * decay + elapsed_secs
end

-- Tickets -----------------------------------------------------------------------------------

local function decode_ticket(id, record)
  return ticket_from_columns(split(record), { id = id })
end

local encode_ticket = ticket_record

-- Waiting tickets (layout 3, see the top of this file and the waiting line above) -----------

-- The room's generation and seen floor, also for scripts that do not load the room.
local known_generation, known_floor = nil, nil
local function current_generation()
  if room then
    return room.generation
  end
  if known_generation == nil then
    known_generation = tonumber(redis.call('HGET', META, 'generation'))
  end
  return known_generation
end

local function seen_floor()
  if room then
    return room.seen_floor
  end
  if known_floor == nil then
    known_floor = tonumber(redis.call('HGET', META, 'seen_floor') or '0')
  end
  return known_floor
end

-- The last contact a waiting record says, the seen floor included.
local function record_last_seen(joined_at, seen)
  return math.max(joined_at + seen, seen_floor())
end

-- A waiting ticket's bucket value: its id, then its record, which holds the last contact as
-- the time since joining.
local function encode_waiting(ticket)
  local last_seen = ticket.last_seen
  ticket.last_seen = math.max(0, last_seen - ticket.joined_at)
  local record = waiting_record(ticket)
  ticket.last_seen = last_seen
  return ticket.id .. '|' .. record
end

-- A waiting ticket from its position and bucket value.
local function decode_waiting(position, value)
  local id, record = string.match(value, '^([^|]*)|(.*)$')
  local ticket = waiting_from_columns(split(record), {
    id = id,
    state = 'w',
    position = position,
    generation = current_generation(),
    x = '',
    y = '',
    bucketed = true,
  })
  ticket.last_seen = record_last_seen(ticket.joined_at, ticket.last_seen)
  return ticket
end

-- A ticket by id: looked for in the line first, where the tickets that ask most often (the
-- waiting ones, on every status) are; a ticket that no longer waits has left the index.
local function get_ticket(id)
  local position, index_bucket = index_position(id)
  if position then
    local value = redis.call('HGET', bucket_key(position), int(position))
    local ticket = value and decode_waiting(position, value)
    if ticket and ticket.id == id then
      ticket.index_key = index_bucket
      return ticket
    end
  end
  local record = redis.call('HGET', TICKETS, id)
  return record and decode_ticket(id, record) or nil
end

-- Writes a ticket where its state keeps it: a waiting one in its line bucket, any other in
-- `tickets` (leaving its bucket when it stops waiting).
local function put_ticket(ticket)
  if ticket.state == 'w' then
    redis.call('HSET', bucket_key(ticket.position), int(ticket.position), encode_waiting(ticket))
    ticket.bucketed = true
    return
  end
  if ticket.bucketed then
    redis.call('HDEL', bucket_key(ticket.position), int(ticket.position))
    ticket.bucketed = false
  end
  redis.call('HSET', TICKETS, ticket.id, encode_ticket(ticket))
end

-- Contact from a waiting ticket: its last contact only ever moves forward.
local function touch_waiting(ticket)
  if NOW > ticket.last_seen then
    ticket.last_seen = NOW
    put_ticket(ticket)
  end
end

-- Layouts 1 and 2 to 3, once, over the whole line. Both kept each lane as a zset of ids by
-- position (`waiting`, `priority`), which become the count trees. Layout 2 kept the record
-- without its id in the line bucket; layout 1 kept it in `tickets`, with the last contact in a
-- zset `idle` (the meta key with its last part replaced), which goes.
migrate_line = function(from)
  local idle = string.sub(META, 1, -5) .. 'idle'
  -- Layouts 1 and 2 kept no counts: the lanes start empty.
  load_lanes({}, 1)
  local lines = {}
  for _, key in ipairs({ WAITING, PRIORITY }) do
    lines[key] = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  end
  redis.call('DEL', WAITING, PRIORITY)
  for _, key in ipairs({ WAITING, PRIORITY }) do
    local entries = lines[key]
    for i = 1, #entries, 2 do
      local id, position = entries[i], tonumber(entries[i + 1])
      local value = nil
      if from == '1' then
        local record = redis.call('HGET', TICKETS, id)
        if record then
          local ticket = decode_ticket(id, record)
          ticket.last_seen = tonumber(redis.call('ZSCORE', idle, id) or ticket.last_seen)
          value = encode_waiting(ticket)
          redis.call('HDEL', TICKETS, id)
        end
      else
        local record = redis.call('HGET', bucket_key(position), int(position))
        value = record and (id .. '|' .. record)
      end
      if value then
        redis.call('HSET', bucket_key(position), int(position), value)
        enter_lane(key, id, position)
      end
    end
  end
  redis.call('DEL', idle)
  flush_counts()
  redis.call('HSET', META, 'layout', LAYOUT)
end

-- Sessions ----------------------------------------------------------------------------------

local function decode_session(id, record)
  return session_from_columns(split(record), { id = id })
end

local encode_session = session_record

local function get_session(id)
  local record = redis.call('HGET', SESSIONS, id)
  if not record then
    return nil
  end
  return decode_session(id, record)
end

local function put_session(session)
  if redis.call('HSET', SESSIONS, session.id, encode_session(session)) == 1 then
    redis.call('ZADD', SESSION_IDS, 0, session.id)
  end
end

local function expiry_score(session)
  if session.hard_expires_at and session.hard_expires_at < session.expires_at then
    return session.hard_expires_at
  end
  return session.expires_at
end

local function session_alive(session)
  return session.expires_at > NOW
    and (session.hard_expires_at == nil or session.hard_expires_at > NOW)
end

local function capped(expiry, hard)
  if hard and hard < expiry then
    return hard
  end
  return expiry
end

-- Drops an identity's binding when it still names this ticket.
local function unbind_identity(identity, ticket_id)
  if identity ~= '' and redis.call('HGET', IDENTITIES, identity) == ticket_id then
    redis.call('HDEL', IDENTITIES, identity)
  end
end

-- Events (SPEC §14.9; RoomState's VisitorEvent, written as visitor_events.rs writes them) ---

-- The call's events argument, read by begin_call; nil while events are off.
local EVENT_CAP, EVENT_PREFIX, EVENT_ROOM
local events_emitted = 0

-- `YYYY-MM-DDTHH:MM:SS.mmmZ` (civil from days, as visitor_events.rs::rfc3339_millis).
local function rfc3339(ms)
  local seconds = math.floor(ms / 1000)
  local days = math.floor(seconds / 86400)
  local of_day = seconds - days * 86400
  local z = days + 719468
  local era = math.floor(z / 146097)
  local day_of_era = z - era * 146097
  local year_of_era = math.floor((day_of_era - math.floor(day_of_era / 1460)
    + math.floor(day_of_era / 36524) - math.floor(day_of_era / 146096)) / 365)
  local day_of_year = day_of_era - (365 * year_of_era + math.floor(year_of_era / 4)
    - math.floor(year_of_era / 100))
  local shifted_month = math.floor((5 * day_of_year + 2) / 153)
  local day = day_of_year - math.floor((153 * shifted_month + 2) / 5) + 1
  local month = shifted_month < 10 and shifted_month + 3 or shifted_month - 9
  local year = year_of_era + era * 400
  if month <= 2 then
    year = year + 1
  end
  return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%03dZ', year, month, day,
    math.floor(of_day / 3600), math.floor(of_day % 3600 / 60), of_day % 60, ms % 1000)
end

-- The text of an escaped field ('' or '=' and the text with '%' and '|' percent-escaped).
local function plain_text(field)
  if field == nil or field == '' then
    return nil
  end
  return (string.gsub(string.sub(field, 2), '%%(%x%x)', function(hex)
    return string.char(tonumber(hex, 16))
  end))
end

-- Appends one event to the room's outbox, in this script, so with the change it reports. Its
-- id is the call's 24 hex digits and 8 counting the call's events; past the cap the oldest
-- entry goes (one per append once full).
local function emit(kind, ticket_id, session_id, position, generation, uid_field)
  if not EVENT_PREFIX then
    return
  end
  events_emitted = events_emitted + 1
  local data = {}
  if ticket_id and ticket_id ~= '' then
    data[#data + 1] = '"ticket":"' .. ticket_id .. '"'
  end
  if session_id and session_id ~= '' then
    data[#data + 1] = '"session":"' .. session_id .. '"'
  end
  local uid = plain_text(uid_field)
  if uid then
    data[#data + 1] = '"uid":' .. cjson.encode(uid)
  end
  data[#data + 1] = '"position":' .. int(position)
  data[#data + 1] = '"generation":' .. int(generation)
  local event = '{"id":"' .. EVENT_PREFIX .. string.format('%08x', events_emitted)
    .. '","type":"' .. kind .. '","room":"' .. EVENT_ROOM .. '","at":"' .. rfc3339(NOW)
    .. '","data":{' .. table.concat(data, ',') .. '}}'
  local sequence = redis.call('INCR', OUTBOX_SEQUENCE)
  redis.call('XADD', OUTBOX, 'MAXLEN', EVENT_CAP, int(sequence) .. '-1', 'e', event)
end

local function emit_ticket(kind, ticket)
  emit(kind, ticket.id, nil, ticket.position, ticket.generation, ticket.identity)
end

local function emit_session(kind, session)
  emit(kind, session.ticket, session.id, session.position, session.generation, session.uid)
end

-- State changes (RoomState's private methods) -----------------------------------------------

local function admit(ticket)
  local claim_deadline = NOW + room.claim_ttl
  leave_lane(line_of(ticket), ticket)
  ticket.state = 'a'
  ticket.x = int(NOW)
  ticket.y = int(claim_deadline)
  put_ticket(ticket)
  if ticket.position > room.serving then
    room.serving = ticket.position
  end
  redis.call('ZADD', ADMITTED, int(claim_deadline), ticket.id)
  room.admitted = room.admitted + 1
  room.changed = true
  emit_ticket('ticket.admitted', ticket)
end

-- Turns an admitted ticket into a session; the capacity slot moves from admitted to active.
local function claim(ticket, session_id)
  local hard = nil
  if room.session_max then
    hard = NOW + room.session_max
  end
  local expires_at = capped(NOW + room.session_ttl, hard)
  if ticket.state == 'a' then
    redis.call('ZREM', ADMITTED, ticket.id)
  end
  ticket.state = 'c'
  ticket.x = session_id
  ticket.y = ''
  put_ticket(ticket)
  local session = {
    id = session_id,
    state = 'a',
    ticket = ticket.id,
    position = ticket.position,
    generation = ticket.generation,
    issued_at = NOW,
    renewed_at = NOW,
    expires_at = expires_at,
    hard_expires_at = hard,
    ended_at = nil,
    reason = '',
    uid = ticket.identity,
  }
  put_session(session)
  redis.call('ZADD', ACTIVE, int(expiry_score(session)), session_id)
  room.passes = room.passes + 1
  room.changed = true
  emit_session('pass.issued', session)
  return session
end

local function end_ticket(ticket, reason)
  if ticket.state == 'w' then
    leave_lane(line_of(ticket), ticket)
  elseif ticket.state == 'a' then
    redis.call('ZREM', ADMITTED, ticket.id)
  end
  unbind_identity(ticket.identity, ticket.id)
  ticket.state = 'e'
  ticket.x = int(NOW)
  ticket.y = reason
  put_ticket(ticket)
  redis.call('ZADD', ENDED, int(NOW), ticket.id)
  room.changed = true
  emit_ticket('ticket.' .. reason, ticket)
end

local function finish_session(session, reason)
  if session.state ~= 'a' then
    return
  end
  session.state = 'e'
  session.ended_at = NOW
  session.reason = reason
  put_session(session)
  redis.call('ZREM', ACTIVE, session.id)
  if reason == 'completed' then
    room.completed = room.completed + 1
  elseif reason == 'abandoned' or reason == 'revoked' then
    room.sessions_abandoned = room.sessions_abandoned + 1
  elseif reason == 'expired' then
    room.expired = room.expired + 1
  end
  -- A claimed session's uid is its ticket's identity.
  if session.ticket ~= '' then
    unbind_identity(session.uid, session.ticket)
  end
  redis.call('ZADD', FORGET, int(math.max(NOW + room.retention, session.expires_at)), session.id)
  room.changed = true
  emit_session('session.' .. reason, session)
end

local function forget_history()
  local cutoff = NOW - room.retention
  local tickets = redis.call('ZRANGEBYSCORE', ENDED, '-inf', int(cutoff))
  for _, id in ipairs(tickets) do
    redis.call('HDEL', TICKETS, id)
  end
  if #tickets > 0 then
    redis.call('ZREMRANGEBYSCORE', ENDED, '-inf', int(cutoff))
  end
  local sessions = redis.call('ZRANGEBYSCORE', FORGET, '-inf', int(NOW))
  for _, id in ipairs(sessions) do
    local session = get_session(id)
    if session and session.ticket ~= '' then
      redis.call('HDEL', TICKETS, session.ticket)
    end
    redis.call('HDEL', SESSIONS, id)
    redis.call('ZREM', SESSION_IDS, id)
  end
  if #sessions > 0 then
    redis.call('ZREMRANGEBYSCORE', FORGET, '-inf', int(NOW))
  end
  redis.call('ZREMRANGEBYSCORE', CANCELLED, '-inf', int(NOW))
end

-- The pre-queue lottery (anteroom_core::lottery) -------------------------------------------
-- ChaCha20 keyed with the seed (nonce 0, block counter from 0), its 32-bit words in order;
-- a number below n by rejection; Fisher-Yates over the cohort in position order.

local function chacha_stream(seed_hex)
  local key = {}
  for i = 0, 7 do
    local word = 0
    for b = 3, 0, -1 do
      local at = (i * 4 + b) * 2 + 1
      word = word * 256 + tonumber(string.sub(seed_hex, at, at + 1), 16)
    end
    key[i + 1] = bit.tobit(word)
  end
  local stream = { counter = 0, words = {}, next = 17 }
  local function quarter(x, a, b, c, d)
    x[a] = bit.tobit(x[a] + x[b]); x[d] = bit.rol(bit.bxor(x[d], x[a]), 16)
    x[c] = bit.tobit(x[c] + x[d]); x[b] = bit.rol(bit.bxor(x[b], x[c]), 12)
    x[a] = bit.tobit(x[a] + x[b]); x[d] = bit.rol(bit.bxor(x[d], x[a]), 8)
    x[c] = bit.tobit(x[c] + x[d]); x[b] = bit.rol(bit.bxor(x[b], x[c]), 7)
  end
  function stream.next_u32()
    if stream.next > 16 then
      local state = {
        bit.tobit(0x61707865), bit.tobit(0x3320646e), bit.tobit(0x79622d32),
        bit.tobit(0x6b206574), key[1], key[2], key[3], key[4], key[5], key[6], key[7], key[8],
        bit.tobit(stream.counter % 4294967296), bit.tobit(math.floor(stream.counter / 4294967296)),
        0, 0,
      }
      local x = {}
      for i = 1, 16 do x[i] = state[i] end
      for _ = 1, 10 do
        quarter(x, 1, 5, 9, 13); quarter(x, 2, 6, 10, 14)
        quarter(x, 3, 7, 11, 15); quarter(x, 4, 8, 12, 16)
        quarter(x, 1, 6, 11, 16); quarter(x, 2, 7, 12, 13)
        quarter(x, 3, 8, 9, 14); quarter(x, 4, 5, 10, 15)
      end
      for i = 1, 16 do
        stream.words[i] = bit.tobit(x[i] + state[i]) % 4294967296
      end
      stream.counter = stream.counter + 1
      stream.next = 1
    end
    local word = stream.words[stream.next]
    stream.next = stream.next + 1
    return word
  end
  return stream
end

local function below(stream, n)
  local limit = 4294967296 - (4294967296 % n)
  while true do
    local word = stream.next_u32()
    if word < limit then
      return word % n
    end
  end
end

-- Draws the pre-queue lottery once an event with shuffle has opened (RoomState's
-- settle_schedule): the tickets waiting now get the cohort's positions in drawn order.
local function settle()
  local event = room.open_event
  if event == nil or not event.shuffle then
    return
  end
  if room.draw_opens_at and room.draw_opens_at >= event.opens_at then
    return
  end
  -- The regular line's tickets in position order, read a bucket at a time.
  local positions, values = {}, {}
  each_waiting(room.last_position, function(position, value)
    if lane_of_value(value) == WAITING then
      positions[#positions + 1] = position
      values[#values + 1] = value
    end
  end)
  local n = #positions
  local order = {}
  for i = 1, n do order[i] = i end
  local stream = chacha_stream(DRAW_SEED)
  for i = n - 1, 1, -1 do
    local j = below(stream, i + 1)
    order[i + 1], order[j + 1] = order[j + 1], order[i + 1]
  end
  -- Each ticket's value (its id and record, which holds no position) moves to its new
  -- position unchanged, a bucket at a time: the cohort's positions stay the same set, so the
  -- lane's counts stay as they are; each id's index entry follows it.
  local buckets, writes = {}, {}
  for slot = 1, n do
    local to = positions[slot]
    local key = bucket_key(to)
    if not writes[key] then
      writes[key] = {}
      buckets[#buckets + 1] = key
    end
    local value = values[order[slot]]
    local fields = writes[key]
    fields[#fields + 1] = int(to)
    fields[#fields + 1] = value
    index_set(string.match(value, '^([^|]*)|'), to)
  end
  for _, key in ipairs(buckets) do
    redis.call('HSET', key, unpack(writes[key]))
  end
  -- The fields in the store's DRAW_FIELDS order: opens_at, drawn_at, seed, cohort,
  -- through_position (records.rs reads them so).
  room.draw = table.concat({
    int(event.opens_at), int(NOW), DRAW_SEED, int(n), int(room.last_position),
  }, '|')
  room.draw_opens_at = event.opens_at
  redis.call('HSET', META, 'draw', room.draw)
  room.changed = true
end

local function is_idle(ticket)
  return ticket.last_seen + room.idle_ttl <= NOW
end

local function abandon(ticket, report)
  end_ticket(ticket, 'abandoned')
  room.abandoned = room.abandoned + 1
  report.abandoned = report.abandoned + 1
end

-- The first position of a line bucket holding a waiting ticket at or after `from`'s bucket,
-- in either lane, or nil.
local function next_waiting_position(from)
  local found = nil
  for _, key in ipairs({ WAITING, PRIORITY }) do
    local rank = count_before_bucket(key, line_bucket(from)) + 1
    local leaf = rank <= lane_count(key) and leaf_of_rank(key, rank)
    if leaf then
      local position = (leaf - 1) * LINE_BUCKET
      found = math.min(found or position, position)
    end
  end
  return found
end

-- Abandons idle waiting tickets (SPEC §5.1 step 1) with bounded work: it examines line buckets
-- in position order from where the previous tick stopped (meta `sweep`, a bucket number),
-- wrapping around at the end of the line, until it has examined SWEEP_BUDGET records (plus
-- the rest of the bucket it is in) or come back to where it started. A line of up to
-- SWEEP_BUDGET tickets is thus examined whole on every tick, like the engine's; in a longer
-- one an idle ticket is found within ceil(waiting / SWEEP_BUDGET) ticks. Tickets about to be
-- admitted are checked again by the admission itself (admit_next), so none is admitted idle.
-- Each pass over the whole line leaves the earliest contact it kept (meta `idle_bound`), and
-- until the cutoff reaches it the sweep reads nothing: a tick that refills a slot freed by an
-- ended session (hundreds a second in a crowd) then costs no record reads.
local function sweep_idle(report)
  local cutoff = NOW - room.idle_ttl
  -- A ticket's last contact is its own or the seen floor, whichever is later: none is idle
  -- while the floor is after the cutoff, nor while the cutoff is before `idle_bound`.
  if seen_floor() > cutoff then
    return 0
  end
  local state = redis.call('HMGET', META, 'sweep', 'sweep_min', 'idle_bound')
  if tonumber(state[3] or '0') > cutoff then
    return 0
  end
  local start = tonumber(state[1] or '0')
  -- The earliest own contact among the records kept since the cursor last left bucket 0; nil
  -- when it did not leave from there (a pass begun before this was kept counts for nothing).
  local pass_min = start == 0 and NOW or tonumber(state[2])
  local bound = nil
  local bucket, examined, wrapped = start, 0, false
  while examined < SWEEP_BUDGET and not (wrapped and bucket >= start) do
    local entries = redis.call('HGETALL', bucket_key(bucket * LINE_BUCKET))
    if #entries == 0 then
      local position = next_waiting_position(bucket * LINE_BUCKET)
      if position ~= nil then
        -- (never the same bucket again, even if a record were missing)
        bucket = math.max(bucket + 1, math.floor(position / LINE_BUCKET))
      else
        -- A pass from bucket 0 to the end of the line: no record kept was in contact before
        -- pass_min, and joins, touches and the floor only make contacts later.
        bound = pass_min or bound
        pass_min = NOW
        if wrapped or start == 0 then
          bucket = 0
          break
        end
        bucket, wrapped = 0, true
      end
    else
      for i = 1, #entries, 2 do
        local value = entries[i + 1]
        local joined_at, seen = string.match(value, '^[^|]*|(%d+)|(%d+)|')
        local contact = tonumber(joined_at) + tonumber(seen)
        if contact <= cutoff then
          abandon(decode_waiting(tonumber(entries[i]), value), report)
        elseif pass_min and contact < pass_min then
          pass_min = contact
        end
      end
      examined = examined + #entries / 2
      bucket = bucket + 1
    end
  end
  local writes = { 'sweep', int(bucket), 'sweep_min', pass_min and int(pass_min) or '' }
  if bound then
    writes[5], writes[6] = 'idle_bound', int(bound)
  end
  redis.call('HSET', META, unpack(writes))
  return examined
end

-- The admitter (SPEC §5.1, RoomState::tick). `seed` drives random-order picks.
local function tick(seed)
  local report = {}
  for _, name in ipairs(TICK_REPORT_FIELDS) do
    report[name] = 0
  end
  local had_demand = n_waiting() > 0

  for _, id in ipairs(redis.call('ZRANGEBYSCORE', ACTIVE, '-inf', int(NOW))) do
    local session = get_session(id)
    if session then
      finish_session(session, 'expired')
      report.expired = report.expired + 1
    else
      redis.call('ZREM', ACTIVE, id)
    end
  end

  for _, id in ipairs(redis.call('ZRANGEBYSCORE', ADMITTED, '-inf', int(NOW))) do
    local ticket = get_ticket(id)
    if ticket then
      end_ticket(ticket, 'no_show')
      room.no_show = room.no_show + 1
      report.no_shows = report.no_shows + 1
    else
      redis.call('ZREM', ADMITTED, id)
    end
  end

  sweep_idle(report)

  refill()
  local admissions = 0
  if room.mode == 'queue' then
    admissions = math.min(n_waiting(), free_slots(), available())
  elseif room.mode == 'passthrough' then
    admissions = n_waiting()
  end
  -- The next ticket to admit from `line` (the first, or at random), or nil when it is empty.
  local function next_of(line)
    local count = lane_count(line)
    if count == 0 then
      return nil
    end
    local rank = 1
    if line == WAITING and room.order == 'random' then
      rank = math.random(count)
    end
    return decode_waiting(nth_in_lane(line, rank))
  end
  math.randomseed(seed)
  -- Idle tickets met on the way are abandoned, never admitted: at most SWEEP_BUDGET of them,
  -- after which this tick admits no more (the next one goes on).
  local budget = SWEEP_BUDGET
  -- The priority lane goes first, in join order (SPEC §12).
  for _, line in ipairs({ PRIORITY, WAITING }) do
    while report.admitted < admissions and budget > 0 do
      local ticket = next_of(line)
      if ticket == nil then
        break
      end
      if is_idle(ticket) then
        abandon(ticket, report)
        budget = budget - 1
      else
        admit(ticket)
        report.admitted = report.admitted + 1
      end
    end
  end
  if room.mode == 'queue' then
    spend(report.admitted)
  end
  record_rate(report.admitted, had_demand)

  forget_history()
  return report
end

-- A ticket leaves (RoomState::leave): a waiting or admitted one leaves the line, one holding a
-- pass abandons its session; a freed slot is refilled by a tick with `seed` in the same call.
-- Returns whether the ticket was taken out, and the session it ended (nil when none).
local function leave_ticket(ticket, seed)
  local freed = false
  local removed = false
  local ended_session = nil
  if ticket.state == 'w' or ticket.state == 'a' then
    freed = ticket.state == 'a'
    end_ticket(ticket, 'left')
    room.left = room.left + 1
    removed = true
  elseif ticket.state == 'c' then
    -- Leaving with a pass gives the slot up at once and revokes the pass.
    local session = get_session(ticket.x)
    if session and session.state == 'a' then
      finish_session(session, 'abandoned')
      ended_session = session.id
      freed = true
      removed = true
    end
  end
  if freed then
    tick(seed)
  end
  return removed, ended_session
end

-- Answers ------------------------------------------------------------------------------------

-- `ahead`, when the caller knows it (a ticket that just joined its lane is its last), saves
-- counting it.
local function waiting_reply(ticket, ahead)
  -- Each lane counts its own (RoomState::waiting_view).
  ahead = ahead or ahead_in_lane(line_of(ticket), ticket.position)
  return {
    'waiting', ticket.id, encode_ticket(ticket), int(ahead), int(room.serving), int(n_waiting()),
    float(room.rate_admissions), float(room.rate_seconds), room.config_mode,
    optional_int(room.opens_at),
  }
end

local function admitted_reply(ticket, session)
  return {
    'admitted', ticket.id, encode_ticket(ticket), session.id, encode_session(session),
    int(room.serving), int(n_waiting()),
  }
end

-- The current meaning of a ticket (RoomState::status): keeps a waiting ticket alive, and claims
-- the session of an admitted one (the same session on every later ask, I7).
local function status(ticket_id, generation, session_id)
  if generation ~= room.generation then
    return { 'error', 'ticket_expired' }
  end
  local ticket = get_ticket(ticket_id)
  if not ticket then
    return { 'error', 'ticket_unknown' }
  end
  if ticket.generation ~= generation then
    return { 'error', 'ticket_expired' }
  end
  if ticket.state == 'w' then
    touch_waiting(ticket)
    return waiting_reply(ticket)
  elseif ticket.state == 'a' then
    local session = claim(ticket, session_id)
    return admitted_reply(ticket, session)
  elseif ticket.state == 'c' then
    local session = get_session(ticket.x)
    if session == nil or session.state ~= 'a' or not session_alive(session) then
      if session and session.state == 'a' then
        finish_session(session, 'expired')
      end
      return { 'error', 'ticket_expired' }
    end
    return admitted_reply(ticket, session)
  end
  return { 'error', 'ticket_expired' }
end

local function room_not_found()
  return { 'error', 'room_not_found' }
end

-- The text of an error `pcall` caught in one request of a batch (join.lua, status.lua): a
-- table with `err` for a command Redis refused, a string for an error of the script's own.
local function failure_text(failure)
  if type(failure) == 'table' then
    return tostring(failure.err)
  end
  return tostring(failure)
end

-- Binds one call's keys and arguments, and starts it from a clean state: every function of the
-- library begins with this (scripts.rs), since the library's locals outlive a call.
local function begin_call(keys, args)
  KEYS, ARGV = keys, args
  META, TICKETS, WAITING, LINE, ADMITTED = keys[1], keys[2], keys[3], keys[4], keys[5]
  SESSIONS, ACTIVE, IDENTITIES, ENDED, FORGET = keys[6], keys[7], keys[8], keys[9], keys[10]
  PRIORITY, SESSION_IDS, CANCELLED = keys[11], keys[12], keys[13]
  OUTBOX, OUTBOX_SEQUENCE = keys[14], keys[15]
  CHANNEL = args[2]
  DEFAULT_RETENTION = tonumber(args[3])
  if args[1] ~= '' then
    NOW = tonumber(args[1])
  else
    local time = redis.call('TIME')
    NOW = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  end
  EVENT_CAP, EVENT_PREFIX, EVENT_ROOM = string.match(args[4], '^(%d+)|(%x+)|([a-z0-9-]+)$')
  events_emitted = 0
  room = nil
  lanes, index_state = nil, nil
  DRAW_SEED = nil
  known_generation, known_floor = nil, nil
end
