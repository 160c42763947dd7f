-- session_page: one page of the room's sessions in the order of their ids. Changes nothing but
-- the id index, which it builds once for a room whose sessions predate it.
-- ARGV[5] list ids greater than this ('' from the start)
-- ARGV[6] the filter: '' every session, 'a' active ones, else an end reason ('expired', …)
-- ARGV[7] at most this many sessions
-- ARGV[8] examine at most this many sessions
-- Returns: 'ok', where the next page starts ('' when there is none), then each listed
-- session's id and record.

if not room_exists() then
  return room_not_found()
end
if redis.call('EXISTS', SESSION_IDS) == 0 then
  for _, id in ipairs(redis.call('HKEYS', SESSIONS)) do
    redis.call('ZADD', SESSION_IDS, 0, id)
  end
end

local after, filter = ARGV[5], ARGV[6]
local limit, budget = tonumber(ARGV[7]), tonumber(ARGV[8])

-- A session record's state is its first column, its end reason SESSION_REASON_COLUMN (from
-- the store's field list, like the record's reader and writer in room.lua).
local function wanted(record)
  if filter == '' then
    return true
  end
  local state = string.sub(record, 1, 1)
  if filter == 'a' then
    return state == 'a'
  end
  if state ~= 'e' then
    return false
  end
  local field = 0
  for part in string.gmatch(record, '([^|]*)|?') do
    field = field + 1
    if field == SESSION_REASON_COLUMN then
      return part == filter
    end
  end
  return false
end

local reply = { 'ok', '' }
local listed, examined = 0, 0
local start = after == '' and '-' or ('(' .. after)
local last_listed = nil
while examined < budget do
  local ids = redis.call('ZRANGE', SESSION_IDS, start, '+', 'BYLEX', 'LIMIT', 0,
    math.min(256, budget - examined))
  if #ids == 0 then
    return reply
  end
  local records = redis.call('HMGET', SESSIONS, unpack(ids))
  for i, id in ipairs(ids) do
    local record = records[i]
    if record and wanted(record) then
      if listed == limit then
        -- One more wanted session exists: the page ends at the last one listed.
        reply[2] = last_listed
        return reply
      end
      listed = listed + 1
      last_listed = id
      reply[#reply + 1] = id
      reply[#reply + 1] = record
    end
    examined = examined + 1
    start = '(' .. id
    if examined == budget then
      -- Out of budget: the next page starts after the last id examined.
      reply[2] = id
      return reply
    end
  end
end
return reply
