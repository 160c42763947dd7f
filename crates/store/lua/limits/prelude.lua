-- Shared by every rate-limit script. Lua numbers are doubles: integers below 2^53 are exact,
-- and the limits' parameters are validated so every value below stays under that bound. The
-- algorithms are ports of anteroom_core::ratelimit::algorithms; a property test holds them to
-- identical decisions.
--
-- A decision is { allowed (1|0), remaining, reset_after_ms, retry_after_ms (-1: never), delay_ms }.
-- Each algorithm is a table of:
--   load(key) -> state or nil
--   decide(p, state, now, cost) -> decision, new state (nil: nothing changes)
--   save(key, state)
--   forget_at(p, state) -> ms from which the state no longer matters (the key's expiry)
--   mark(state) -> where an allowed request was counted in the state it wrote (the core's
--     reservation mark: a window's start or index, a log entry's time; 0 for the buckets)
--   refund(key, p, cost, mark): takes a reserved request back out of the key's state (the
--     core's refund), keeping the key's expiry (a refund never makes the state matter longer)

local function floor_div(a, b)
  return math.floor(a / b)
end

local function ceil_div(a, b)
  return math.floor((a + b - 1) / b)
end

local function int(n)
  return string.format('%d', n)
end

local function pass(remaining, reset, delay)
  return { 1, remaining, reset, -1, delay }
end

local function refuse(reset, retry)
  return { 0, 0, reset, retry, 0 }
end

local algorithms = {}
