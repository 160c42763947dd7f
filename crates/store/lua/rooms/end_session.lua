-- end_session: ends sessions early (completed, abandoned, revoked, …), freeing their slots and
-- revoking their passes, then ticks once so the slots are refilled at once
-- (RoomState::end_session for each, in order, then tick). A node sends the ends it has queued
-- for a room as one call (end_batch.rs): one tick for many ends, not one per end. Ending an
-- ended session again changes nothing but still ticks; a call whose sessions are all unknown
-- does not.
-- ARGV[5] seed for random-order admissions
-- ARGV[6] seed for a pre-queue lottery due now (64 hex digits)
-- ARGV[7] the number of sessions, n (at least 1)
-- the i-th session's id at ARGV[6 + 2i], its reason at ARGV[7 + 2i]
-- Returns one answer per session, in order: 'ok', session id, session record (as it was
-- before the tick); or 'error' and why.

local count = tonumber(ARGV[7])
if not count or count < 1 or #ARGV ~= 7 + 2 * count then
  return redis.error_reply('end_session: expected a count and that many sessions and reasons')
end
local answers = {}
if not load_room(true) then
  for i = 1, count do
    answers[i] = room_not_found()
  end
  return answers
end
DRAW_SEED = ARGV[6]
settle()
local ended = {}
for i = 1, count do
  local session = get_session(ARGV[6 + 2 * i])
  if session then
    finish_session(session, ARGV[7 + 2 * i])
    answers[i] = { 'ok', session.id, encode_session(session) }
    ended[#ended + 1] = session.id
  else
    answers[i] = { 'error', 'session_unknown' }
  end
end
-- As an end alone: a call that found none of its sessions changes nothing, not even by a tick.
if #ended == 0 then
  return answers
end
tick(tonumber(ARGV[5]))
save_room()
-- One notice per ended session: each names the pass the other nodes refuse from then on.
for _, id in ipairs(ended) do
  notify('end_session', id)
end
return answers
