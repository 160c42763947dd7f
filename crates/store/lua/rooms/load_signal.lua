-- load_signal: the room's latest load signal (put_signal.lua). Changes nothing.
-- Returns: 'ok' and the signal record, or '' when no origin pushed one; or 'error' and why.

if redis.call('HEXISTS', META, 'generation') == 0 then
  return room_not_found()
end
return { 'ok', redis.call('HGET', META, 'signal') or '' }
