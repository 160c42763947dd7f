-- line_masks: the regular line's live positions as its buckets' masks, read from the lane's
-- count hash without visiting a ticket (O(line / LINE_BUCKET)). Changes nothing.
-- Returns: 'ok', the first bucket and the masks of it and the buckets after it up to the one
-- of the room's last position, each as 32 hex digits (byte i of the mask first, '' for a
-- bucket with none: replies carry text); or 'error' and why.

if not room_exists() then
  return room_not_found()
end
local reply = { 'ok' }
if lane_count(WAITING) == 0 then
  return reply
end
local first = line_bucket(nth_in_lane(WAITING, 1))
local last = line_bucket(tonumber(redis.call('HGET', META, 'last_position')))
reply[2] = int(first)
-- HMGET in slices: Lua's unpack takes a bounded number of values.
local SLICE = 4096
local HEX = string.rep('%02x', MASK_BYTES)
for from = first, last, SLICE do
  local fields = {}
  for bucket = from, math.min(from + SLICE - 1, last) do
    fields[#fields + 1] = 'm' .. int(bucket)
  end
  local masks = redis.call('HMGET', WAITING, unpack(fields))
  for i = 1, #fields do
    local mask = masks[i]
    reply[#reply + 1] = mask and string.format(HEX, string.byte(mask, 1, MASK_BYTES)) or ''
  end
end
return reply
