-- cancel_join: undoes joins their callers gave up on (a call outlived the store's timeout,
-- SPEC §9.4, so the visitor was answered an error and holds no ticket token), all of one room
-- in one call. If a join ran, the ticket it made leaves the line as `leave` would (an admitted
-- slot, or the session the join claimed, is given back and refilled by a tick in the same
-- script); if it has not run, its ticket id is remembered until ARGV[5] ms from now, and
-- join.lua refuses it. A join that resumed a held ticket made none under its id, so the held
-- ticket is left alone.
-- ARGV[5] how long to remember an id whose join has not run, in milliseconds
-- ARGV[6] seed for random-order admissions
-- ARGV[7] seed for a pre-queue lottery due now (64 hex digits)
-- ARGV[8...] the ticket ids the joins named (at least one)
-- Returns: 'ok' and how many tickets were taken out of the line; or 'error' and why.

if not load_room() then
  return room_not_found()
end
DRAW_SEED = ARGV[7]
settle()
redis.call('ZREMRANGEBYSCORE', CANCELLED, '-inf', int(NOW))
local forget_at = int(NOW + tonumber(ARGV[5]))
local seed = tonumber(ARGV[6])
local removed, ended_sessions = 0, {}
for i = 8, #ARGV do
  local ticket = get_ticket(ARGV[i])
  if ticket then
    -- Each refill draws from its own seed, so random-order admissions stay random.
    local left, ended_session = leave_ticket(ticket, seed + i)
    if left then
      removed = removed + 1
    end
    ended_sessions[#ended_sessions + 1] = ended_session
  else
    redis.call('ZADD', CANCELLED, forget_at, ARGV[i])
  end
end

if room.changed then
  save_room()
  if #ended_sessions == 0 then
    notify('leave')
  end
  -- One notice per pass revoked: each names the session nodes must refuse.
  for _, session in ipairs(ended_sessions) do
    notify('leave', session)
  end
end
return { 'ok', int(removed) }
