-- put_room: creates a room, or replaces its configuration keeping queue, sessions and counters
-- (RoomState::new then RoomState::set_config).
-- ARGV[5] configuration (JSON, read only by the Rust side)
-- ARGV[6] the configuration (as ARGV[5]) the room must still have, or '' to write whatever
--   it has: a compare-and-swap for the admin API's conditional writes
-- ARGV[7...] the meta fields the scripts read, as name, value pairs (config_fields in
--   redis_store.rs): mode, order, max_active, per_minute, capacity (bucket capacity in units),
--   session_ttl, session_max ('' for none), claim_ttl, idle_ttl, retention, renew_after
--   (durations in milliseconds), schedule, before, after (see room.lua), priority_codes
--   (`<sha256 hex>=<uses>` joined by ',', '' for none)
-- Returns: 'ok' and the room's snapshot; 'changed' and the stored configuration when ARGV[6]
--   is not it (nothing written); a refusal 'room_not_found' when ARGV[6] names a configuration
--   and there is no room.

if ARGV[6] ~= '' then
  local stored = redis.call('HGET', META, 'config')
  if not stored then
    return { 'error', 'room_not_found' }
  end
  if stored ~= ARGV[6] then
    return { 'changed', stored }
  end
end

local given = {}
for i = 7, #ARGV, 2 do
  given[ARGV[i]] = ARGV[i + 1]
end

-- Every field is assigned by name: a nil session_max must replace an old value, and pairs()
-- would skip it.
local function apply_config()
  room.config_mode = given.mode
  room.order = given.order
  room.base_max_active = tonumber(given.max_active)
  room.base_per_minute = tonumber(given.per_minute)
  room.base_capacity = tonumber(given.capacity)
  room.events = parse_schedule(given.schedule)
  room.before = given.before
  room.after = given.after
  room.session_ttl = tonumber(given.session_ttl)
  room.session_max = optional_number(given.session_max)
  room.claim_ttl = tonumber(given.claim_ttl)
  room.idle_ttl = tonumber(given.idle_ttl)
  room.retention = tonumber(given.retention)
  room.renew_after = tonumber(given.renew_after)
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

-- The configuration's fields as given: each is already the text load_room reads back.
redis.call('HSET', META, 'layout', LAYOUT, 'config', ARGV[5], unpack(ARGV, 7))
save_room()
room.changed = true
notify('config')
return snapshot_reply({ 'ok' })
