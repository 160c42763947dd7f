-- Leaky bucket with nginx limit_req semantics: excess in units (period per request), leaking
-- `limit` units per ms. State: hash { excess, last }.

local function leak(units, elapsed, rate)
  if elapsed >= ceil_div(units, rate) then
    return 0
  end
  return units - elapsed * rate
end

algorithms.leaky_bucket = {
  load = function(key)
    local v = redis.call('HMGET', key, 'excess', 'last')
    if not v[1] then
      return nil
    end
    return { excess = tonumber(v[1]), last = tonumber(v[2]) }
  end,

  decide = function(p, s, now, cost)
    local period, rate = p.period, p.limit
    local burst = p.burst * period
    local first, reset, elapsed = 0, 0, 0
    if s then
      now = math.max(now, s.last)
      elapsed = now - s.last
      first = leak(s.excess + period, elapsed, rate)
      reset = math.max(0, ceil_div(s.excess + period, rate) - elapsed)
    end
    if cost == 0 then
      local remaining = 0
      if first <= burst then
        remaining = floor_div(burst - first, period) + 1
      end
      return pass(remaining, reset, 0), nil
    end
    if cost > p.burst + 1 then
      return refuse(reset, -1), nil
    end
    local excess = first + (cost - 1) * period
    if excess > burst then
      local allowed_from = 0
      if s then
        allowed_from = ceil_div(s.excess + period - (p.burst + 1 - cost) * period, rate)
      end
      return refuse(reset, math.max(0, allowed_from - elapsed)), nil
    end
    local delay_units = p.delay * period
    local delay = 0
    if not p.nodelay and excess > delay_units then
      delay = floor_div(excess - delay_units, rate)
    end
    return pass(floor_div(burst - excess, period), ceil_div(excess + period, rate), delay),
      { excess = excess, last = now }
  end,

  save = function(key, s)
    redis.call('HSET', key, 'excess', int(s.excess), 'last', int(s.last))
  end,

  forget_at = function(p, s)
    return s.last + ceil_div(s.excess + p.period, p.limit)
  end,

  mark = function(s)
    return 0
  end,

  -- excess + limit x last falls by cost x period: from excess while it holds enough, else by
  -- moving last back whole milliseconds.
  refund = function(key, p, cost, mark)
    local s = algorithms.leaky_bucket.load(key)
    if not s then
      return
    end
    local units = cost * p.period
    if s.excess >= units then
      redis.call('HSET', key, 'excess', int(s.excess - units))
      return
    end
    local short = units - s.excess
    local back = ceil_div(short, p.limit)
    if back > s.last then
      redis.call('DEL', key)
      return
    end
    redis.call('HSET', key, 'excess', int(back * p.limit - short), 'last', int(s.last - back))
  end,
}
