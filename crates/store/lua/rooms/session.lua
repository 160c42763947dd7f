-- session: one session's record, if the room remembers it. Changes nothing.
-- ARGV[5] session id
-- Returns: 'ok' and the session record ('' when unknown); or 'error' and why.

if not room_exists() then
  return room_not_found()
end
return { 'ok', redis.call('HGET', SESSIONS, ARGV[5]) or '' }
