-- advance: the operator's advance by hand (RoomState::advance): admits up to `count` more
-- waiting tickets now, lowest positions first, bounded by the line (I8) and by free capacity
-- (I2); neither the admission bucket nor the mode holds it back.
-- ARGV[5] count
-- ARGV[6] seed for a pre-queue lottery due now (64 hex digits)
-- Returns: 'ok', the snapshot, then how many were admitted; or 'error' and why.

if not load_room(true) then
  return room_not_found()
end
DRAW_SEED = ARGV[6]
settle()
local had_demand = n_waiting() > 0
local admissions = math.min(tonumber(ARGV[5]), n_waiting(), free_slots())
local admitted = 0
-- The priority lane first, then the regular line, lowest positions first.
for _, line in ipairs({ PRIORITY, WAITING }) do
  while admitted < admissions and lane_count(line) > 0 do
    admit(decode_waiting(nth_in_lane(line, 1)))
    admitted = admitted + 1
  end
end
if admitted > 0 then
  record_rate(admitted, had_demand)
  save_room()
end
notify('advance')
local reply = snapshot_reply({ 'ok' })
reply[#reply + 1] = int(admitted)
return reply
