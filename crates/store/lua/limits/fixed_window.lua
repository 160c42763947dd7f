-- Fixed window with lazy reset: the window starts at the first request after the previous one
-- ended. State: hash { start, count }.

algorithms.fixed_window = {
  load = function(key)
    local v = redis.call('HMGET', key, 'start', 'count')
    if not v[1] then
      return nil
    end
    return { start = tonumber(v[1]), count = tonumber(v[2]) }
  end,

  decide = function(p, s, now, cost)
    local period, limit = p.period, p.limit
    local start, count = now, 0
    if s and now < s.start + period then
      start, count = s.start, s.count
      now = math.max(now, s.start)
    end
    local reset = 0
    if count > 0 then
      reset = start + period - now
    end
    if cost == 0 then
      return pass(math.max(0, limit - count), reset, 0), nil
    end
    if cost > limit then
      return refuse(reset, -1), nil
    end
    if count + cost > limit then
      return refuse(reset, start + period - now), nil
    end
    count = count + cost
    return pass(limit - count, start + period - now, 0), { start = start, count = count }
  end,

  save = function(key, s)
    redis.call('HSET', key, 'start', int(s.start), 'count', int(s.count))
  end,

  forget_at = function(p, s)
    return s.start + p.period
  end,

  mark = function(s)
    return s.start
  end,

  -- Only the window the request was counted in; a window left empty goes.
  refund = function(key, p, cost, mark)
    local s = algorithms.fixed_window.load(key)
    if not s or s.start ~= mark then
      return
    end
    local count = math.max(0, s.count - cost)
    if count == 0 then
      redis.call('DEL', key)
    else
      redis.call('HSET', key, 'count', int(count))
    end
  end,
}
