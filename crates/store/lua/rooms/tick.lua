-- tick: the admitter (SPEC §5.1, RoomState::tick): expire sessions and no-shows, abandon idle
-- tickets, refill the admission bucket, admit up to the free capacity (lowest positions first,
-- or at random), advance serving, and forget history older than the retention.
-- ARGV[5] seed for random-order admissions
-- ARGV[6] seed for a pre-queue lottery due now (64 hex digits)
-- Returns: 'ok', admitted, expired, no-shows, abandoned; or 'error' and why.

if not load_room() then
  return room_not_found()
end
DRAW_SEED = ARGV[6]
settle()
local report = tick(tonumber(ARGV[5]))
save_room()
notify('tick')
return {
  'ok', int(report.admitted), int(report.expired), int(report.no_shows), int(report.abandoned),
}
