-- reset: starts a new generation (RoomState::reset): every waiting and admitted ticket ends,
-- every active session is revoked, serving jumps to the last position; with purge, the old
-- generation's records are deleted. Positions go on increasing (I1 across generations).
-- ARGV[5] '1' to purge, '0' to keep the records
-- Returns: 'ok' and the snapshot; or 'error' and why.

if not load_room() then
  return room_not_found()
end
for _, id in ipairs(redis.call('ZRANGE', PRIORITY, 0, -1)) do
  end_ticket(get_ticket(id), 'reset')
end
for _, id in ipairs(redis.call('ZRANGE', WAITING, 0, -1)) do
  end_ticket(get_ticket(id), 'reset')
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
  -- The line buckets emptied as their tickets ended.
  redis.call('DEL', TICKETS, WAITING, ADMITTED, SESSIONS, ACTIVE, IDENTITIES, ENDED, FORGET,
    PRIORITY, SESSION_IDS, CANCELLED)
end
save_room()
notify('reset')
return snapshot_reply({ 'ok' })
