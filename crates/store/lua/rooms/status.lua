-- status: a batch of tickets' current meanings in one room (RoomState::status for each, in the
-- order given): keeps a waiting ticket alive, claims the session of an admitted one, and
-- returns the same session on every later ask (I7). A node sends the statuses that gathered
-- for a room while its calls in flight ran (see redis_store/status_batch.rs): the room's
-- meta is read, written and announced once per call, not once per poll.
-- ARGV[5] seed for a pre-queue lottery due now (64 hex digits): settled once, before every
-- status of the call
-- ARGV[6] the number of statuses, n (at least 1)
-- the i-th status's ticket id at ARGV[4 + 3i], its token's generation at ARGV[5 + 3i], and the
-- id for a new session (used only if this status claims one) at ARGV[6 + 3i]
-- Returns one MessagePack string (as join.lua): an array of one answer per status, in order,
-- each 'waiting', ticket id, ticket record, ahead, serving, waiting, decayed admissions,
-- decayed seconds, mode, opening time (or ''); or 'admitted', ticket id, ticket record,
-- session id, session record, serving, waiting; or 'error' and why; or 'failed' and the error
-- a command or the script raised in that status alone. Or, for the whole batch, the array
-- 'error', 'room_not_found'.

local count = tonumber(ARGV[6])
if not count or count < 1 or #ARGV ~= 6 + 3 * count then
  return redis.error_reply('status: expected a count and that many tickets')
end
if not load_room() then
  return cmsgpack.pack(room_not_found())
end
DRAW_SEED = ARGV[5]
settle()
local answers = {}
for i = 1, count do
  local base = 3 + 3 * i
  -- Each status is confined: an error in one is its own answer, and the room's changes made
  -- by the statuses around it (and by the failed one before its error: scripts do not roll
  -- back, as in join.lua) are still saved below.
  local ok, answer = pcall(status, ARGV[base + 1], tonumber(ARGV[base + 2]), ARGV[base + 3])
  if not ok then
    answer = { 'failed', failure_text(answer) }
  end
  answers[i] = answer
end
if room.changed then
  save_room()
  notify('status')
end
return cmsgpack.pack(answers)
