-- Append one semantic-cache entry: its body, its log record, and the log's trims, atomically.
-- KEYS[1] the log (a Stream), KEYS[2] the entry's body (same hash tag: one slot)
-- ARGV: body, ttl_ms, max_entries, vector (float32 bytes), literals, entry id
-- The TTL trim is measured from the new record's own id (Redis's clock), like every reader's.
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '=', ARGV[3], '*', 'v', ARGV[4], 'l', ARGV[5], 'e', ARGV[6])
local ms = tonumber(string.match(id, '^(%d+)'))
redis.call('XTRIM', KEYS[1], 'MINID', tostring(math.max(0, ms - tonumber(ARGV[2]))))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return id
