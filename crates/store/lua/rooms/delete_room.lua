-- delete_room: deletes a room and everything in it.
-- Returns: 'ok' and '1' when the room existed, '0' when it did not.

-- (A room in an older layout is migrated first, so its keys are those named here.)
local existed = room_exists()
if existed then
  -- The line buckets holding waiting tickets, those with a mask (`m<n>`) in either lane's
  -- counts (named without reading a record), and the id index's buckets.
  local buckets = {}
  for _, lane in ipairs({ WAITING, PRIORITY }) do
    for _, field in ipairs(redis.call('HKEYS', lane)) do
      local bucket = string.match(field, '^m(%d+)$')
      if bucket then
        buckets[#buckets + 1] = bucket_key(tonumber(bucket) * LINE_BUCKET)
      end
    end
  end
  for bucket = 0, index_buckets() - 1 do
    buckets[#buckets + 1] = index_key(bucket)
  end
  for first = 1, #buckets, 1000 do
    redis.call('DEL', unpack(buckets, first, math.min(first + 999, #buckets)))
  end
end
redis.call('DEL', META, TICKETS, WAITING, ADMITTED, SESSIONS, ACTIVE, IDENTITIES, ENDED,
  FORGET, PRIORITY, SESSION_IDS, CANCELLED)
if existed then
  redis.call('SPUBLISH', CHANNEL, 'deleted')
  return { 'ok', '1' }
end
return { 'ok', '0' }
