-- end_session: ends a session early (completed, abandoned, revoked, …), freeing its slot and
-- revoking its pass, then ticks so the slot is refilled at once (RoomState::end_session and
-- tick). Ending an ended session again changes nothing but still ticks.
-- ARGV[5] session id
-- ARGV[6] reason
-- ARGV[7] seed for random-order admissions
-- ARGV[8] seed for a pre-queue lottery due now (64 hex digits)
-- Returns: 'ok', session id, session record (as it was before the tick); or 'error' and why.

if not load_room(true) then
  return room_not_found()
end
DRAW_SEED = ARGV[8]
settle()
local session = get_session(ARGV[5])
if not session then
  return { 'error', 'session_unknown' }
end
finish_session(session, ARGV[6])
local record = encode_session(session)
tick(tonumber(ARGV[7]))
save_room()
notify('end_session', session.id)
return { 'ok', session.id, record }
