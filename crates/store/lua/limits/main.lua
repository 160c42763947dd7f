-- Decides the requests of one call, all or nothing: every key is decided (a key named twice
-- sees the first request's effect), and only if every request is allowed are the new states
-- written, each key expiring when its state stops mattering.
--
-- KEYS: one per request. ARGV[1]: now in ms, or '' to use the server's TIME. ARGV[2]: extra
-- milliseconds added to every expiry. Then per request: algorithm, cost, limit, period_ms,
-- burst, delay, nodelay (1|0).
-- Returns per request: allowed, limit, remaining, reset_after_ms, retry_after_ms (-1: none),
-- delay_ms, reservation mark (-1: the request took nothing: a peek, or the call was refused).

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
local extra_ttl = tonumber(ARGV[2])

local states, loaded, changed = {}, {}, {}
local reply = {}
local marks = {}
local all_allowed = true
for i = 1, #KEYS do
  local key = KEYS[i]
  local at = 2 + (i - 1) * 7
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
  if not loaded[key] then
    states[key] = algorithm.load(key)
    loaded[key] = true
  end
  local decision, next = algorithm.decide(p, states[key], now, tonumber(ARGV[at + 2]))
  if decision[1] == 0 then
    all_allowed = false
  elseif next then
    states[key] = next
    changed[key] = { algorithm, p }
    marks[i] = { key, algorithm }
  end
  reply[#reply + 1] = decision[1]
  reply[#reply + 1] = p.limit
  reply[#reply + 1] = decision[2]
  reply[#reply + 1] = decision[3]
  reply[#reply + 1] = decision[4]
  reply[#reply + 1] = decision[5]
  reply[#reply + 1] = -1
end

if all_allowed then
  for key, how in pairs(changed) do
    local algorithm, p = how[1], how[2]
    local state = states[key]
    algorithm.save(key, state)
    local ttl = math.max(1, algorithm.forget_at(p, state) - now) + extra_ttl
    redis.call('PEXPIRE', key, int(ttl))
  end
  -- Marks are read from the states written, after every request of the call.
  for i, how in pairs(marks) do
    reply[i * 7] = how[2].mark(states[how[1]])
  end
end
return reply
