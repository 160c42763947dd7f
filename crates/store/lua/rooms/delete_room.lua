-- delete_room: deletes a room and everything in it.
-- Returns: 'ok' and '1' when the room existed, '0' when it did not.

local existed = redis.call('EXISTS', META) == 1
redis.call('DEL', META, TICKETS, WAITING, IDLE, ADMITTED, SESSIONS, ACTIVE, IDENTITIES, ENDED,
  FORGET, PRIORITY, SESSION_IDS)
if existed then
  redis.call('SPUBLISH', CHANNEL, 'deleted')
  return { 'ok', '1' }
end
return { 'ok', '0' }
