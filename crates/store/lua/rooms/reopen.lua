-- reopen: run once for every room when a store opens: every waiting ticket counts as seen now
-- (RoomState::restore), so a restart of the service never abandons anybody. One field: the
-- room's seen floor (room.lua), below which no waiting ticket's last contact counts.
-- Returns: 'ok' and how many tickets were waiting; or 'error' and why.

if not room_exists() then
  return room_not_found()
end
if NOW > seen_floor() then
  redis.call('HSET', META, 'seen_floor', int(NOW))
end
return { 'ok', int(n_waiting()) }
