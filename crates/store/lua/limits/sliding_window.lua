-- Sliding window counter: windows aligned to multiples of the period, estimate
-- floor(prev * (period - elapsed) / period) + current. State: hash { window, prev, current }.

-- The first offset x in [0, period] at which floor(count * (period - x) / period) <= room.
local function first_offset(period, count, room)
  if count == 0 then
    return 0
  end
  return math.max(0, period - floor_div((room + 1) * period - 1, count))
end

local function zero_at(period, s)
  local start = s.window * period
  if s.current > 0 then
    return start + period + first_offset(period, s.current, 0)
  end
  return start + first_offset(period, s.prev, 0)
end

local function retry_at(period, limit, s, cost)
  local start = s.window * period
  if limit >= s.current + cost then
    local offset = first_offset(period, s.prev, limit - s.current - cost)
    if offset < period then
      return start + offset
    end
  end
  return start + period + first_offset(period, s.current, limit - cost)
end

algorithms.sliding_window = {
  load = function(key)
    local v = redis.call('HMGET', key, 'window', 'prev', 'current')
    if not v[1] then
      return nil
    end
    return { window = tonumber(v[1]), prev = tonumber(v[2]), current = tonumber(v[3]) }
  end,

  decide = function(p, s, now, cost)
    local period, limit = p.period, p.limit
    if s then
      now = math.max(now, s.window * period)
    end
    local window = floor_div(now, period)
    local prev, current = 0, 0
    if s and s.window == window then
      prev, current = s.prev, s.current
    elseif s and s.window + 1 == window then
      prev = s.current
    end
    local elapsed = now - window * period
    local estimate = floor_div(prev * (period - elapsed), period) + current
    local rolled = { window = window, prev = prev, current = current }
    local reset = math.max(0, zero_at(period, rolled) - now)
    if cost == 0 then
      return pass(math.max(0, limit - estimate), reset, 0), nil
    end
    if cost > limit then
      return refuse(reset, -1), nil
    end
    if estimate + cost > limit then
      return refuse(reset, retry_at(period, limit, rolled, cost) - now), nil
    end
    local next = { window = window, prev = prev, current = current + cost }
    return pass(limit - estimate - cost, math.max(0, zero_at(period, next) - now), 0), next
  end,

  save = function(key, s)
    redis.call('HSET', key, 'window', int(s.window), 'prev', int(s.prev), 'current',
      int(s.current))
  end,

  forget_at = function(p, s)
    return (s.window + 2) * p.period
  end,

  mark = function(s)
    return s.window
  end,

  -- From the current count in the request's window, from prev once rolled into the next one.
  refund = function(key, p, cost, mark)
    local s = algorithms.sliding_window.load(key)
    if not s then
      return
    end
    if s.window == mark then
      s.current = math.max(0, s.current - cost)
    elseif s.window == mark + 1 then
      s.prev = math.max(0, s.prev - cost)
    else
      return
    end
    if s.prev == 0 and s.current == 0 then
      redis.call('DEL', key)
    else
      redis.call('HSET', key, 'prev', int(s.prev), 'current', int(s.current))
    end
  end,
}
