-- leave: a waiting ticket leaves the line, an admitted one gives its slot up, and one holding
-- a pass abandons its session (RoomState::leave). A freed slot is refilled by a tick in the
-- same script.
-- ARGV[5] ticket id
-- ARGV[6] the ticket token's generation
-- ARGV[7] seed for random-order admissions
-- ARGV[8] seed for a pre-queue lottery due now (64 hex digits)
-- Returns: 'ok', or 'error' and why.

if not load_room(true) then
  return room_not_found()
end
DRAW_SEED = ARGV[8]
settle()
local ticket = get_ticket(ARGV[5])
if not ticket then
  return { 'error', 'ticket_unknown' }
end
if ticket.generation ~= tonumber(ARGV[6]) then
  return { 'error', 'ticket_expired' }
end

local _, ended_session = leave_ticket(ticket, tonumber(ARGV[7]))
save_room()
notify('leave', ended_session)
return { 'ok' }
