-- Sliding window log, exact. State: a list of alternating time, cost (oldest first). The
-- state table keeps what is needed to write back only the difference: how many of the loaded
-- entries were dropped from the front, and the loaded last entry's cost (it grows when a
-- request of the same millisecond merges into it).

algorithms.sliding_log = {
  load = function(key)
    local flat = redis.call('LRANGE', key, 0, -1)
    if #flat == 0 then
      return nil
    end
    local entries = {}
    for i = 1, #flat, 2 do
      entries[#entries + 1] = { tonumber(flat[i]), tonumber(flat[i + 1]) }
    end
    return {
      entries = entries,
      loaded = #entries,
      dropped = 0,
      loaded_last_cost = entries[#entries][2],
    }
  end,

  decide = function(p, s, now, cost)
    local period, limit = p.period, p.limit
    local entries = s and s.entries or {}
    local n = #entries
    if n > 0 then
      now = math.max(now, entries[n][1])
    end
    local count = 0
    for i = 1, n do
      if now < entries[i][1] + period then
        count = count + entries[i][2]
      end
    end
    local reset = 0
    if count > 0 then
      reset = entries[n][1] + period - now
    end
    if cost == 0 then
      return pass(math.max(0, limit - count), reset, 0), nil
    end
    if cost > limit then
      return refuse(reset, -1), nil
    end
    if count + cost > limit then
      local left, retry = count, 0
      for i = 1, n do
        if now < entries[i][1] + period then
          left = left - entries[i][2]
          if left + cost <= limit then
            retry = entries[i][1] + period - now
            break
          end
        end
      end
      return refuse(reset, retry), nil
    end
    -- Drop the expired front, then append (or merge into the entry of this millisecond).
    local first = 1
    while first <= n and entries[first][1] + period <= now do
      first = first + 1
    end
    local kept = {}
    for i = first, n do
      kept[#kept + 1] = { entries[i][1], entries[i][2] }
    end
    if #kept > 0 and kept[#kept][1] == now then
      kept[#kept][2] = kept[#kept][2] + cost
    else
      kept[#kept + 1] = { now, cost }
    end
    local loaded = s and s.loaded or 0
    local dropped = (s and s.dropped or 0) + math.min(first - 1, loaded - (s and s.dropped or 0))
    local next = {
      entries = kept,
      loaded = loaded,
      dropped = dropped,
      loaded_last_cost = s and s.loaded_last_cost or 0,
    }
    return pass(limit - count - cost, period, 0), next
  end,

  save = function(key, s)
    if s.dropped > 0 then
      redis.call('LTRIM', key, 2 * s.dropped, -1)
    end
    local kept = s.loaded - s.dropped
    if kept > 0 and s.entries[kept][2] ~= s.loaded_last_cost then
      redis.call('LSET', key, 2 * kept - 1, int(s.entries[kept][2]))
    end
    for i = kept + 1, #s.entries do
      redis.call('RPUSH', key, int(s.entries[i][1]), int(s.entries[i][2]))
    end
  end,

  forget_at = function(p, s)
    return s.entries[#s.entries][1] + p.period
  end,

  mark = function(s)
    return s.entries[#s.entries][1]
  end,

  -- The entry logged at `mark` loses the cost, and goes at 0 (an empty list is no key).
  refund = function(key, p, cost, mark)
    local flat = redis.call('LRANGE', key, 0, -1)
    for i = #flat - 1, 1, -2 do
      if tonumber(flat[i]) == mark then
        local left = math.max(0, tonumber(flat[i + 1]) - cost)
        if left > 0 then
          redis.call('LSET', key, i, int(left))
        else
          redis.call('LSET', key, i - 1, '-')
          redis.call('LSET', key, i, '-')
          redis.call('LREM', key, 0, '-')
        end
        return
      end
    end
  end,
}
