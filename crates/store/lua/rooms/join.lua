-- join: joins the queue, or resumes the visitor's live ticket by identity or by the ticket the
-- visitor holds (RoomState::join). In a `queue` room where nobody else waits and limits allow,
-- the visitor is admitted and claims a session at once; a `passthrough` room admits everybody.
-- ARGV[5] id for a new ticket
-- ARGV[6] id for a new session (used only if this join claims one)
-- ARGV[7] held ticket id or ''
-- ARGV[8] held ticket's generation or ''
-- ARGV[9] identity ('' or '=' and the escaped identity)
-- ARGV[10] return path ('' or '=' and the escaped path)
-- ARGV[11] seed for a pre-queue lottery due now (64 hex digits)
-- ARGV[12] SHA-256 (hex) of a priority access code presented, or ''
-- ARGV[13] '1': resume only (the join gate, SPEC §14.2): never make a new ticket
-- ARGV[14] the time (ms, the scripts' clock) after which the caller no longer awaits the
--          answer, or '': a join that runs later refuses, so it leaves no ticket nobody holds
-- Returns: a status answer (see room.lua), or 'error' and why.

if not load_room() then
  return room_not_found()
end
-- The caller gave up on this join before it ran (cancel_join.lua): it must leave no ticket.
if redis.call('ZSCORE', CANCELLED, ARGV[5]) then
  return { 'error', 'join_cancelled' }
end
if room.mode == 'closed' then
  return { 'error', 'room_closed' }
end
DRAW_SEED = ARGV[11]
settle()

local new_ticket_id, session_id = ARGV[5], ARGV[6]
local identity, return_to = ARGV[9], ARGV[10]

-- In an identity room the identity decides which ticket is resumed: a ticket presented by
-- somebody else never hands over another user's place.
local resumable = nil
if identity ~= '' then
  resumable = redis.call('HGET', IDENTITIES, identity) or nil
elseif ARGV[7] ~= '' and tonumber(ARGV[8]) == room.generation then
  resumable = ARGV[7]
end
if resumable then
  local answer = status(resumable, room.generation, session_id)
  if answer[1] ~= 'error' then
    if room.changed then
      save_room()
      notify('status')
    end
    return answer
  end
end

local refusal = nil
if ARGV[13] == '1' then
  refusal = 'nothing_to_resume'
elseif ARGV[14] ~= '' and NOW > tonumber(ARGV[14]) then
  refusal = 'join_cancelled'
end
if refusal then
  -- What the failed resume settled (an expiry it found due) stays, as in the engine.
  if room.changed then
    save_room()
    notify('status')
  end
  return { 'error', refusal }
end

-- A code is checked (and counted) only for a new ticket: resuming never spends one. Uses are
-- counted in meta as `code_uses:<sha256 hex>` (RoomMeta::code_uses).
local priority = false
if ARGV[12] ~= '' then
  local codes = redis.call('HGET', META, 'priority_codes') or ''
  local _, _, uses = string.find(',' .. codes, ',' .. ARGV[12] .. '=(%d+)', 1)
  local used = tonumber(redis.call('HGET', META, 'code_uses:' .. ARGV[12]) or '0')
  if uses == nil or used >= tonumber(uses) then
    return { 'error', 'invalid_priority_code' }
  end
  redis.call('HINCRBY', META, 'code_uses:' .. ARGV[12], 1)
  priority = true
end

room.last_position = room.last_position + 1
room.joined = room.joined + 1
local ticket = {
  id = new_ticket_id,
  state = 'w',
  position = room.last_position,
  generation = room.generation,
  joined_at = NOW,
  last_seen = NOW,
  x = '',
  y = '',
  identity = identity,
  return_to = return_to,
  priority = priority,
}
if identity ~= '' then
  redis.call('HSET', IDENTITIES, identity, new_ticket_id)
end
redis.call('ZADD', line_of(ticket), int(ticket.position), new_ticket_id)
put_ticket(ticket)
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

local answer = status(new_ticket_id, room.generation, session_id)
save_room()
notify('join')
return answer
