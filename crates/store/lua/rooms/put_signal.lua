-- put_signal: keeps the origin's latest load signal (SPEC §5.4) in the room's meta, where
-- every node's controller reads it (load_signal.lua) and delete_room removes it.
-- ARGV[5] the signal record: p95_ms|error_rate|in_flight|received_at (in_flight '' for none)
-- Returns: 'ok'; or 'error' and why.

if redis.call('HEXISTS', META, 'generation') == 0 then
  return room_not_found()
end
redis.call('HSET', META, 'signal', ARGV[5])
return { 'ok' }
