-- status: a ticket's current meaning (RoomState::status): keeps a waiting ticket alive, claims
-- the session of an admitted one, and returns the same session on every later ask (I7).
-- ARGV[5] ticket id
-- ARGV[6] the ticket token's generation
-- ARGV[7] id for a new session (used only if this call claims one)
-- ARGV[8] seed for a pre-queue lottery due now (64 hex digits)
-- Returns: 'waiting', ticket id, ticket record, ahead, serving, waiting, decayed admissions,
-- decayed seconds, mode; or
-- 'admitted', ticket id, ticket record, session id, session record, serving, waiting; or
-- 'error' and why.

if not load_room() then
  return room_not_found()
end
DRAW_SEED = ARGV[8]
settle()
local answer = status(ARGV[5], tonumber(ARGV[6]), ARGV[7])
if room.changed then
  save_room()
  notify('status')
end
return answer
