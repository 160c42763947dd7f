-- waiting_positions: the positions of the live waiting tickets, ascending. Changes nothing.
-- Returns: 'ok' and the positions; or 'error' and why.

if not room_exists() then
  return room_not_found()
end
local reply = { 'ok' }
each_waiting(tonumber(redis.call('HGET', META, 'last_position')), function(position, value)
  if lane_of_value(value) == WAITING then
    reply[#reply + 1] = int(position)
  end
end)
return reply
