-- snapshot: a consistent summary of the room. Changes nothing.
-- Returns: 'ok' and the snapshot (see snapshot_reply in room.lua); or 'error' and why.

if not load_room(true) then
  return room_not_found()
end
return snapshot_reply({ 'ok' })
