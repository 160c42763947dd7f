-- records: every ticket and session the room remembers, at one instant. Changes nothing.
-- Returns: 'ok', the number of tickets, then for each its id, record and (for a waiting
-- ticket) its last contact or ''; then the number of sessions, then each id and record.

if redis.call('EXISTS', META) == 0 then
  return room_not_found()
end
local last_seen = {}
local idle = redis.call('ZRANGE', IDLE, 0, -1, 'WITHSCORES')
for i = 1, #idle, 2 do
  last_seen[idle[i]] = idle[i + 1]
end
local reply = { 'ok' }
local tickets = redis.call('HGETALL', TICKETS)
reply[#reply + 1] = int(#tickets / 2)
for i = 1, #tickets, 2 do
  reply[#reply + 1] = tickets[i]
  reply[#reply + 1] = tickets[i + 1]
  reply[#reply + 1] = last_seen[tickets[i]] or ''
end
local sessions = redis.call('HGETALL', SESSIONS)
reply[#reply + 1] = int(#sessions / 2)
for i = 1, #sessions, 2 do
  reply[#reply + 1] = sessions[i]
  reply[#reply + 1] = sessions[i + 1]
end
return reply
