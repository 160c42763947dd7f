-- reopen: run once for every room when a store opens: every waiting ticket counts as seen now
-- (RoomState::restore), so a restart of the service never abandons anybody.
-- Returns: 'ok' and how many tickets were touched; or 'error' and why.

if redis.call('EXISTS', META) == 0 then
  return room_not_found()
end
local stale = redis.call('ZRANGEBYSCORE', IDLE, '-inf', '(' .. int(NOW))
local batch = {}
for _, id in ipairs(stale) do
  batch[#batch + 1] = int(NOW)
  batch[#batch + 1] = id
  if #batch >= 1000 then
    redis.call('ZADD', IDLE, unpack(batch))
    batch = {}
  end
end
if #batch > 0 then
  redis.call('ZADD', IDLE, unpack(batch))
end
return { 'ok', int(#stale) }
