-- waiting_positions: the positions of the live waiting tickets, ascending. Changes nothing.
-- Returns: 'ok' and the positions; or 'error' and why.

if not room_exists() then
  return room_not_found()
end
local reply = { 'ok' }
local line = redis.call('ZRANGE', WAITING, 0, -1, 'WITHSCORES')
for i = 2, #line, 2 do
  reply[#reply + 1] = line[i]
end
return reply
