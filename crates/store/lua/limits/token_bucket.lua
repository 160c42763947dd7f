-- Token bucket: capacity x period units, refilled by `limit` units per ms; a request takes
-- cost x period units. State: hash { level, last }.

algorithms.token_bucket = {
  load = function(key)
    local v = redis.call('HMGET', key, 'level', 'last')
    if not v[1] then
      return nil
    end
    return { level = tonumber(v[1]), last = tonumber(v[2]) }
  end,

  decide = function(p, s, now, cost)
    local period, rate = p.period, p.limit
    local full = p.capacity * period
    local level = full
    if s then
      now = math.max(now, s.last)
      local elapsed = now - s.last
      if s.level < full and elapsed < ceil_div(full - s.level, rate) then
        level = s.level + elapsed * rate
      end
    end
    local reset = ceil_div(full - level, rate)
    if cost == 0 then
      return pass(floor_div(level, period), reset, 0), nil
    end
    if cost > p.capacity then
      return refuse(reset, -1), nil
    end
    local need = cost * period
    if level < need then
      return refuse(reset, ceil_div(need - level, rate)), nil
    end
    level = level - need
    return pass(floor_div(level, period), ceil_div(full - level, rate), 0),
      { level = level, last = now }
  end,

  save = function(key, s)
    redis.call('HSET', key, 'level', int(s.level), 'last', int(s.last))
  end,

  forget_at = function(p, s)
    return s.last + ceil_div(math.max(0, p.capacity * p.period - s.level), p.limit)
  end,

  mark = function(s)
    return 0
  end,

  -- The units go back in, capped at full; last stays.
  refund = function(key, p, cost, mark)
    local s = algorithms.token_bucket.load(key)
    if not s then
      return
    end
    local level = math.min(p.capacity * p.period, s.level + cost * p.period)
    redis.call('HSET', key, 'level', int(level))
  end,
}
