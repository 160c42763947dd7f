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
local bucket_records, bucket_read = {}, nil
for _, line in ipairs({ WAITING, PRIORITY }) do
  local entries = redis.call('ZRANGE', line, 0, -1, 'WITHSCORES')
  for i = 1, #entries, 2 do
    local id, position = entries[i], tonumber(entries[i + 1])
    local key = bucket_key(position)
    if key ~= bucket_read then
      bucket_records, bucket_read = {}, key
      local fields = redis.call('HGETALL', key)
      for j = 1, #fields, 2 do
        bucket_records[tonumber(fields[j])] = fields[j + 1]
      end
    end
    local record = bucket_records[position]
    if record then
      reply[#reply + 1] = id
      reply[#reply + 1] = encode_ticket(decode_waiting(id, position, record))
      count = count + 1
    end
  end
end
reply[2] = int(count)
local sessions = redis.call('HGETALL', SESSIONS)
reply[#reply + 1] = int(#sessions / 2)
for i = 1, #sessions, 2 do
  reply[#reply + 1] = sessions[i]
  reply[#reply + 1] = sessions[i + 1]
end
return reply
