-- put_room: creates a room, or replaces its configuration keeping queue, sessions and counters
-- (RoomState::new then RoomState::set_config).
-- ARGV[5] configuration (JSON, read only by the Rust side)
-- ARGV[6..15] mode, order, max_active, admit_per_minute, bucket capacity in units,
--   session_ttl, session_max ('' for none), claim_ttl, ticket_idle_ttl, renewal threshold
--   (durations in milliseconds)
-- ARGV[16..18] schedule, before, after (see room.lua)
-- ARGV[19] priority access codes: `<sha256 hex>=<uses>` joined by ',' ('' for none)
-- ARGV[20] the configuration (as ARGV[5]) the room must still have, or '' to write whatever
--   it has: a compare-and-swap for the admin API's conditional writes
-- Returns: 'ok' and the room's snapshot; 'changed' and the stored configuration when ARGV[20]
--   is not it (nothing written); a refusal 'room_not_found' when ARGV[20] names a configuration
--   and there is no room.

if ARGV[20] ~= '' then
  local stored = redis.call('HGET', META, 'config')
  if not stored then
    return { 'error', 'room_not_found' }
  end
  if stored ~= ARGV[20] then
    return { 'changed', stored }
  end
end

-- Every field is assigned by name: a nil session_max must replace an old value, and pairs()
-- would skip it.
local function apply_config()
  room.config_mode = ARGV[6]
  room.order = ARGV[7]
  room.base_max_active = tonumber(ARGV[8])
  room.base_per_minute = tonumber(ARGV[9])
  room.base_capacity = tonumber(ARGV[10])
  room.events = parse_schedule(ARGV[16])
  room.before = ARGV[17]
  room.after = ARGV[18]
  room.session_ttl = tonumber(ARGV[11])
  room.session_max = optional_number(ARGV[12])
  room.claim_ttl = tonumber(ARGV[13])
  room.idle_ttl = tonumber(ARGV[14])
  room.renew_after = tonumber(ARGV[15])
  apply_schedule()
end

if load_room() then
  -- Budget earned under the old rate is kept (trimmed to the new burst); a room that had no
  -- rate limit starts its new one with a full bucket.
  refill()
  local was_unlimited = room.per_minute == 0
  apply_config()
  if was_unlimited then
    room.units = room.capacity
    room.units_at = NOW
  end
  room.units = math.min(room.units, room.capacity)
else
  room = {
    generation = 1,
    last_position = 0,
    serving = 0,
    rate_admissions = 0,
    rate_seconds = 0,
    rate_at = nil,
    draw = '',
    seen_floor = 0,
  }
  for _, name in ipairs(TOTAL_FIELDS) do
    room[name] = 0
  end
  apply_config()
  room.units = room.capacity
  room.units_at = NOW
end

redis.call('HSET', META,
  'layout', LAYOUT,
  'config', ARGV[5],
  'mode', room.config_mode,
  'order', room.order,
  'max_active', int(room.base_max_active),
  'per_minute', int(room.base_per_minute),
  'capacity', int(room.base_capacity),
  'session_ttl', int(room.session_ttl),
  'session_max', optional_int(room.session_max),
  'claim_ttl', int(room.claim_ttl),
  'idle_ttl', int(room.idle_ttl),
  'renew_after', int(room.renew_after),
  'schedule', ARGV[16],
  'before', ARGV[17],
  'after', ARGV[18],
  'priority_codes', ARGV[19])
save_room()
room.changed = true
notify('config')
return snapshot_reply({ 'ok' })
