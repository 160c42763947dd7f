-- issue_session: issues a session by hand (an operator's pass): no ticket, and it counts
-- against capacity like any other session, so it is refused when every slot is taken (I2;
-- RoomState::issue_session).
-- ARGV[5] session id
-- ARGV[6] uid ('' or '=' and the escaped uid)
-- ARGV[7] lifetime in milliseconds
-- Returns: 'ok', session id, session record; or 'error' and why ('room_full').

if not load_room(true) then
  return room_not_found()
end
if room.mode ~= 'passthrough' and free_slots() == 0 then
  return { 'error', 'room_full' }
end
local expires_at = NOW + tonumber(ARGV[7])
local session = {
  id = ARGV[5],
  state = 'a',
  ticket = '',
  position = 0,
  generation = room.generation,
  issued_at = NOW,
  renewed_at = NOW,
  expires_at = expires_at,
  hard_expires_at = expires_at,
  ended_at = nil,
  reason = '',
  uid = ARGV[6],
}
put_session(session)
redis.call('ZADD', ACTIVE, int(expiry_score(session)), session.id)
room.passes = room.passes + 1
room.changed = true
emit_session('pass.issued', session)
save_room()
notify('issue_session')
return { 'ok', session.id, encode_session(session) }
