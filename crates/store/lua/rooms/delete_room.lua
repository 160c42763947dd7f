-- delete_room: deletes a room and everything in it.
-- Returns: 'ok' and '1' when the room existed, '0' when it did not.

local existed = redis.call('EXISTS', META) == 1
-- The line buckets of the waiting tickets (in either layout: layout 1 has none, and its idle
-- zset is the meta key with its last part replaced).
for _, line in ipairs({ WAITING, PRIORITY }) do
  local entries = redis.call('ZRANGE', line, 0, -1, 'WITHSCORES')
  local last = nil
  for i = 2, #entries, 2 do
    local key = bucket_key(tonumber(entries[i]))
    if key ~= last then
      redis.call('DEL', key)
      last = key
    end
  end
end
redis.call('DEL', META, TICKETS, WAITING, ADMITTED, SESSIONS, ACTIVE, IDENTITIES, ENDED,
  FORGET, PRIORITY, SESSION_IDS, CANCELLED, string.sub(META, 1, -5) .. 'idle')
if existed then
  redis.call('SPUBLISH', CHANNEL, 'deleted')
  return { 'ok', '1' }
end
return { 'ok', '0' }
