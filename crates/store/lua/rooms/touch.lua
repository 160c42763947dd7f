-- touch: keeps waiting tickets alive in one call (an open SSE stream is contact too, SPEC
-- §5.2; RoomState::touch_waiting). Tickets of another generation, or no longer waiting, are
-- left alone.
-- ARGV[5...] pairs of ticket id and the ticket token's generation
-- Returns: 'ok' and how many of the tickets were waiting; or 'error' and why.

if not room_exists() then
  return room_not_found()
end
local waiting = 0
for i = 5, #ARGV, 2 do
  local ticket = get_ticket(ARGV[i])
  if ticket and ticket.generation == tonumber(ARGV[i + 1]) and ticket.state == 'w' then
    touch_waiting(ticket)
    waiting = waiting + 1
  end
end
return { 'ok', int(waiting) }
