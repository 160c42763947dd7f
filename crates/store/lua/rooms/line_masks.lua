-- line_masks: the regular line's live positions as its buckets' masks, read from the lane's
-- count hash without visiting a ticket (O(line / LINE_BUCKET)). Changes nothing.
-- Returns: 'ok', the first bucket and one string of the masks of it and the buckets after it
-- up to the one of the room's last position, MASK_BYTES raw bytes each as stored (byte i of
-- the mask first, zeros for a bucket with none); or 'error' and why. Raw bytes, not text: a
-- line of 200,000 is some 1,600 masks, and writing each as hex was most of this call's time.

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
local NONE = string.rep('\0', MASK_BYTES)
local masks = {}
for from = first, last, SLICE do
  local fields = {}
  for bucket = from, math.min(from + SLICE - 1, last) do
    fields[#fields + 1] = 'm' .. int(bucket)
  end
  local stored = redis.call('HMGET', WAITING, unpack(fields))
  for i = 1, #fields do
    local mask = stored[i]
    if not mask then
      mask = NONE
    elseif #mask ~= MASK_BYTES then
      -- The reader splits the string every MASK_BYTES: one mask of another length would
      -- shift every later bucket's positions.
      error('anteroom: mask ' .. fields[i] .. ' of ' .. WAITING .. ' is not ' .. MASK_BYTES .. ' bytes')
    end
    masks[#masks + 1] = mask
  end
end
reply[3] = table.concat(masks)
return reply
