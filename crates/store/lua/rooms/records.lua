-- records: every ticket and session the room remembers, at one instant. Changes nothing.
-- Returns: 'ok', the number of tickets, then each id and record (the full form, room.lua);
-- then the number of sessions, then each id and record.

if not room_exists() then
  return room_not_found()
end
local reply = { 'ok', '' }
local count = 0
local tickets = redis.call('HGETALL', TICKETS)
for i = 1, #tickets, 2 do
  reply[#reply + 1] = tickets[i]
  reply[#reply + 1] = tickets[i + 1]
  count = count + 1
end
-- Waiting tickets, read a bucket at a time.
each_waiting(tonumber(redis.call('HGET', META, 'last_position')), function(position, value)
  local ticket = decode_waiting(position, value)
  reply[#reply + 1] = ticket.id
  reply[#reply + 1] = encode_ticket(ticket)
  count = count + 1
end)
reply[2] = int(count)
local sessions = redis.call('HGETALL', SESSIONS)
reply[#reply + 1] = int(#sessions / 2)
for i = 1, #sessions, 2 do
  reply[#reply + 1] = sessions[i]
  reply[#reply + 1] = sessions[i + 1]
end
return reply
