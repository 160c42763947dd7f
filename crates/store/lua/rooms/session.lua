-- session: a batch of sessions' records in one room, if the room remembers them, in the order
-- asked. Changes nothing. A node sends the checks that gathered for a room while its calls in
-- flight ran (see redis_store/session_batch.rs): one command reads them all.
-- ARGV[5] the number of sessions, n (at least 1)
-- the i-th session's id at ARGV[5 + i]
-- Returns one MessagePack string (as status.lua): an array of one answer per session, in
-- order, each 'ok' and the session's record ('' when unknown). Or, for the whole batch, the
-- array 'error', 'room_not_found'.

local count = tonumber(ARGV[5])
if not count or count < 1 or #ARGV ~= 5 + count then
  return redis.error_reply('session: expected a count and that many session ids')
end
if not room_exists() then
  return cmsgpack.pack(room_not_found())
end
local records = redis.call('HMGET', SESSIONS, unpack(ARGV, 6, 5 + count))
local answers = {}
for i = 1, count do
  answers[i] = { 'ok', records[i] or '' }
end
return cmsgpack.pack(answers)
