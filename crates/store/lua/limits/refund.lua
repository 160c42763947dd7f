-- Takes reserved requests back out of their keys (see each algorithm's refund), last first.
--
-- KEYS: one per request. ARGV per request: algorithm, cost, limit, period_ms, burst, delay,
-- nodelay (1|0), reservation mark. Returns the number of requests refunded.

for i = #KEYS, 1, -1 do
  local at = (i - 1) * 8
  local algorithm = algorithms[ARGV[at + 1]]
  if not algorithm then
    return redis.error_reply('ERR unknown rate-limit algorithm ' .. tostring(ARGV[at + 1]))
  end
  local p = {
    limit = tonumber(ARGV[at + 3]),
    period = tonumber(ARGV[at + 4]),
    burst = tonumber(ARGV[at + 5]),
    delay = tonumber(ARGV[at + 6]),
    nodelay = ARGV[at + 7] == '1',
  }
  p.capacity = p.burst
  if p.capacity == 0 then
    p.capacity = p.limit
  end
  algorithm.refund(KEYS[i], p, tonumber(ARGV[at + 2]), tonumber(ARGV[at + 8]))
end
return #KEYS
