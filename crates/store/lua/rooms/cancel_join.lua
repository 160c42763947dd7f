-- cancel_join: undoes a join its caller gave up on (the call outlived the store's timeout,
-- SPEC §9.4, so the visitor was answered an error and holds no ticket token). If the join ran,
-- the ticket it made leaves the line as `leave` would (an admitted slot, or the session the
-- join claimed, is given back and refilled by a tick in the same script); if it has not run,
-- its ticket id is remembered until ARGV[6] ms from now, and join.lua refuses it. A join that
-- resumed a held ticket made none under this id, so the held ticket is left alone.
-- ARGV[5] the ticket id the join named
-- ARGV[6] how long to remember an id whose join has not run, in milliseconds
-- ARGV[7] seed for random-order admissions
-- ARGV[8] seed for a pre-queue lottery due now (64 hex digits)
-- Returns: 'ok' and '1' when a ticket was taken out of the line, '0' when none was found;
-- or 'error' and why.

if not load_room() then
  return room_not_found()
end
DRAW_SEED = ARGV[8]
settle()
redis.call('ZREMRANGEBYSCORE', CANCELLED, '-inf', int(NOW))
local ticket = get_ticket(ARGV[5])
if not ticket then
  redis.call('ZADD', CANCELLED, int(NOW + tonumber(ARGV[6])), ARGV[5])
  return { 'ok', '0' }
end

local removed, ended_session = leave_ticket(ticket, tonumber(ARGV[7]))
if room.changed then
  save_room()
  notify('leave', ended_session)
end
if removed then
  return { 'ok', '1' }
end
return { 'ok', '0' }
