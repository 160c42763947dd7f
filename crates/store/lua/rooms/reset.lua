-- reset: starts a new generation (RoomState::reset): every waiting and admitted ticket ends,
-- every active session is revoked, serving jumps to the last position; with purge, the old
-- generation's records are deleted. Positions go on increasing (I1 across generations).
-- ARGV[5] '1' to purge, '0' to keep the records
-- Returns: 'ok' and the snapshot; or 'error' and why.

if not load_room(true) then
  return room_not_found()
end
-- The priority lane's tickets end first, then the regular line's, each in position order.
local waiting = { [PRIORITY] = {}, [WAITING] = {} }
each_waiting(room.last_position, function(position, value)
  local lane = waiting[lane_of_value(value)]
  lane[#lane + 1] = decode_waiting(position, value)
end)
for _, line in ipairs({ PRIORITY, WAITING }) do
  for _, ticket in ipairs(waiting[line]) do
    end_ticket(ticket, 'reset')
  end
end
for _, id in ipairs(redis.call('ZRANGE', ADMITTED, 0, -1)) do
  end_ticket(get_ticket(id), 'reset')
end
for _, id in ipairs(redis.call('ZRANGE', ACTIVE, 0, -1)) do
  finish_session(get_session(id), 'reset')
end
room.generation = room.generation + 1
room.serving = room.last_position
room.changed = true
if ARGV[5] == '1' then
  -- The line buckets and the id index emptied as their tickets ended; the lanes' counts are
  -- written (all at zero) before their keys go.
  flush_counts()
  redis.call('DEL', TICKETS, WAITING, ADMITTED, SESSIONS, ACTIVE, IDENTITIES, ENDED, FORGET,
    PRIORITY, SESSION_IDS, CANCELLED)
end
save_room()
notify('reset')
return snapshot_reply({ 'ok' })
