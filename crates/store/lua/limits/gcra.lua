-- GCRA: the theoretical arrival time tat_ms + tat_sub / limit. State: hash { tat, sub }.

algorithms.gcra = {
  load = function(key)
    local v = redis.call('HMGET', key, 'tat', 'sub')
    if not v[1] then
      return nil
    end
    return { tat = tonumber(v[1]), sub = tonumber(v[2]) }
  end,

  decide = function(p, s, now, cost)
    local period, rate = p.period, p.limit
    local full = p.capacity * period
    local debt = 0
    if s then
      now = math.max(now, math.max(0, s.tat - floor_div(full, rate)))
      if s.tat >= now then
        debt = math.min((s.tat - now) * rate + math.min(s.sub, rate - 1), full)
      end
    end
    local reset = ceil_div(debt, rate)
    if cost == 0 then
      return pass(floor_div(full - debt, period), reset, 0), nil
    end
    if cost > p.capacity then
      return refuse(reset, -1), nil
    end
    local after = debt + cost * period
    if after > full then
      return refuse(reset, ceil_div(after - full, rate)), nil
    end
    local tat = floor_div(after, rate)
    return pass(floor_div(full - after, period), ceil_div(after, rate), 0),
      { tat = now + tat, sub = after - tat * rate }
  end,

  save = function(key, s)
    redis.call('HSET', key, 'tat', int(s.tat), 'sub', int(s.sub))
  end,

  forget_at = function(p, s)
    if s.sub > 0 then
      return s.tat + 1
    end
    return s.tat
  end,

  mark = function(s)
    return 0
  end,

  -- The TAT moves back by cost x period units, borrowing whole milliseconds from tat.
  refund = function(key, p, cost, mark)
    local s = algorithms.gcra.load(key)
    if not s then
      return
    end
    local rate = p.limit
    local units = cost * p.period
    local sub = math.min(s.sub, rate - 1)
    if sub >= units then
      redis.call('HSET', key, 'sub', int(sub - units))
      return
    end
    local short = units - sub
    local back = ceil_div(short, rate)
    if back > s.tat then
      redis.call('DEL', key)
      return
    end
    redis.call('HSET', key, 'tat', int(s.tat - back), 'sub', int(back * rate - short))
  end,
}
