-- renew_session: renews a session once more than half its idle lifetime has passed since its
-- last renewal, never past its hard expiry (RoomState::renew_session).
-- ARGV[5] session id
-- Returns: 'ok', '1' if renewed or '0', session id, session record; or 'error' and why.

if not load_room() then
  return room_not_found()
end
local session = get_session(ARGV[5])
if not session then
  return { 'error', 'session_unknown' }
end
if session.state ~= 'a' or not session_alive(session) then
  return { 'error', 'session_ended' }
end
if math.max(0, NOW - session.renewed_at) <= room.renew_after then
  return { 'ok', '0', session.id, encode_session(session) }
end
session.renewed_at = NOW
session.expires_at = capped(NOW + room.session_ttl, session.hard_expires_at)
put_session(session)
redis.call('ZADD', ACTIVE, int(expiry_score(session)), session.id)
emit_session('session.renewed', session)
return { 'ok', '1', session.id, encode_session(session) }
