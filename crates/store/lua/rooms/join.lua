-- join: a batch of joins into one room, run one after the other in the order given, each as
-- RoomState::join would: it joins the queue, or resumes the visitor's live ticket by identity or
-- by the ticket the visitor holds. In a `queue` room where nobody else waits and limits allow,
-- the visitor is admitted and claims a session at once; a `passthrough` room admits everybody.
-- A node sends the joins that gathered for a room while its previous call ran (see
-- redis_store/join_batch.rs): the room's meta is read and written once per call, and one change
-- notice tells of them all, while each join sees the room as the joins before it left it.
-- ARGV[5] the number of joins, n (at least 1); ARGV[6] the seed for a pre-queue lottery due now
-- (64 hex digits): the call's first join settles what is due, so the later ones find no draw
-- due at the same time and one seed serves the call. Then JOIN_ARGS arguments per join, the
-- i-th join's k-th argument at ARGV[6 + (i - 1) * JOIN_ARGS + k]:
--   1 id for a new ticket
--   2 id for a new session (used only if this join claims one)
--   3 held ticket id or ''
--   4 held ticket's generation or ''
--   5 identity ('' or '=' and the escaped identity)
--   6 return path ('' or '=' and the escaped path)
--   7 SHA-256 (hex) of a priority access code presented, or ''
--   8 '1': resume only (the join gate, SPEC §14.2): never make a new ticket
--   9 the time (ms, the scripts' clock) after which the caller no longer awaits the answer,
--     or '': a join that runs later refuses, so it leaves no ticket nobody holds
-- Returns one MessagePack string (cmsgpack, written in C: the node reads one string instead of
-- Redis writing, and the node's client parsing, ten replies a join): an array of one answer per
-- join, in order, each an array of text fields, a status answer (see room.lua), 'error' and
-- why, or 'failed' and the error a command or the script raised in that join alone; or, for
-- the whole batch, the array 'error' and why when the room is missing or closed.

local JOIN_ARGS = 9

if not load_room(true) then
  return cmsgpack.pack(room_not_found())
end
if room.mode == 'closed' then
  return cmsgpack.pack({ 'error', 'room_closed' })
end

-- In an identity room the identity decides which ticket is resumed: a ticket presented by
-- somebody else never hands over another user's place.
local function resumable_ticket(join)
  if join.identity ~= '' then
    return redis.call('HGET', IDENTITIES, join.identity) or nil
  elseif join.held ~= '' and tonumber(join.held_generation) == room.generation then
    return join.held
  end
  return nil
end

-- A code is checked (and counted) only for a new ticket: resuming never spends one. Uses are
-- counted in meta as `code_uses:<sha256 hex>` (RoomMeta::code_uses). False when the code is
-- unknown or used up.
local function spend_priority_code(digest)
  local codes = redis.call('HGET', META, 'priority_codes') or ''
  local _, _, uses = string.find(',' .. codes, ',' .. digest .. '=(%d+)', 1)
  local used = tonumber(redis.call('HGET', META, 'code_uses:' .. digest) or '0')
  if uses == nil or used >= tonumber(uses) then
    return false
  end
  redis.call('HINCRBY', META, 'code_uses:' .. digest, 1)
  return true
end

-- A new waiting ticket for `join`, admitted at once when nobody waits and limits allow; the
-- ticket.
local function new_ticket(join, priority)
  room.last_position = room.last_position + 1
  room.joined = room.joined + 1
  local ticket = {
    id = join.ticket_id,
    state = 'w',
    position = room.last_position,
    generation = room.generation,
    joined_at = NOW,
    last_seen = NOW,
    x = '',
    y = '',
    identity = join.identity,
    return_to = join.return_to,
    priority = priority,
  }
  if join.identity ~= '' then
    redis.call('HSET', IDENTITIES, join.identity, join.ticket_id)
  end
  put_ticket(ticket)
  enter_lane(line_of(ticket), join.ticket_id, ticket.position)
  room.changed = true
  emit_ticket('ticket.joined', ticket)

  local admit_at_once = false
  if room.mode == 'passthrough' then
    admit_at_once = true
  elseif room.mode == 'queue' then
    refill()
    admit_at_once = n_waiting() == 1 and free_slots() >= 1 and available() >= 1
  end
  if admit_at_once then
    spend(1)
    admit(ticket)
  end
  return ticket
end

-- One join; true as its second result when it made a new ticket.
local function join_one(join)
  -- The caller gave up on this join before it ran (cancel_join.lua): it must leave no ticket.
  if join.cancelled then
    return { 'error', 'join_cancelled' }, false
  end
  settle()

  local resumable = resumable_ticket(join)
  if resumable then
    local answer = status(resumable, room.generation, join.session_id)
    if answer[1] ~= 'error' then
      return answer, false
    end
  end
  -- What a failed resume settled (an expiry it found due) stays, as in the engine.
  if join.resume_only == '1' then
    return { 'error', 'nothing_to_resume' }, false
  elseif join.deadline ~= '' and NOW > tonumber(join.deadline) then
    return { 'error', 'join_cancelled' }, false
  end
  local priority = false
  if join.code_digest ~= '' then
    if not spend_priority_code(join.code_digest) then
      return { 'error', 'invalid_priority_code' }, false
    end
    priority = true
  end
  local ticket = new_ticket(join, priority)
  if ticket.state == 'w' then
    -- Its record is as written, seen now; positions only grow, so it is its lane's last.
    return waiting_reply(ticket, lane_count(line_of(ticket)) - 1), true
  end
  return status(join.ticket_id, room.generation, join.session_id), true
end

local answers, joined = {}, false
local count = tonumber(ARGV[5])
DRAW_SEED = ARGV[6]
-- Which joins were cancelled, in one look-up for the batch (no join of a batch cancels one).
local ticket_ids = {}
for i = 1, count do
  ticket_ids[i] = ARGV[6 + (i - 1) * JOIN_ARGS + 1]
end
local cancelled = redis.call('ZMSCORE', CANCELLED, unpack(ticket_ids))
for i = 1, count do
  local base = 6 + (i - 1) * JOIN_ARGS
  -- Each join is confined: an error in one is its own answer, and the joins before and after
  -- it keep theirs. Redis keeps what the failed join wrote before its error (scripts do not
  -- roll back), so the store takes its ticket back (cancel_join.lua).
  local ok, answer, made = pcall(join_one, {
    ticket_id = ARGV[base + 1],
    session_id = ARGV[base + 2],
    held = ARGV[base + 3],
    held_generation = ARGV[base + 4],
    identity = ARGV[base + 5],
    return_to = ARGV[base + 6],
    code_digest = ARGV[base + 7],
    resume_only = ARGV[base + 8],
    deadline = ARGV[base + 9],
    cancelled = cancelled[i],
  })
  if not ok then
    answer, made = { 'failed', failure_text(answer) }, false
  end
  answers[i] = answer
  joined = joined or made
end
if room.changed then
  save_room()
  notify(joined and 'join' or 'status')
end
return cmsgpack.pack(answers)
