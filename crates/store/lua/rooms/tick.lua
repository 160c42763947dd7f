-- tick: the admitter (SPEC §5.1, RoomState::tick): expire sessions and no-shows, abandon idle
-- tickets, refill the admission bucket, admit up to the free capacity (lowest positions first,
-- or at random), advance serving, and forget history older than the retention.
-- ARGV[5] seed for random-order admissions
-- ARGV[6] seed for a pre-queue lottery due now (64 hex digits)
-- Returns: 'ok' and the report's counts in TICK_REPORT_FIELDS order; or 'error' and why.

if not load_room(true) then
  return room_not_found()
end
DRAW_SEED = ARGV[6]
settle()
local report = tick(tonumber(ARGV[5]))
save_room()
notify('tick')
local reply = { 'ok' }
for _, name in ipairs(TICK_REPORT_FIELDS) do
  reply[#reply + 1] = int(report[name])
end
return reply
