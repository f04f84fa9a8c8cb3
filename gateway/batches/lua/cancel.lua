-- validating / in_progress -> cancelling: no line is claimed from now on.
-- KEYS: meta (hash); ARGV: now_s. Returns 1 when cancelled here, 0 otherwise.
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'validating' and status ~= 'in_progress' then
  return 0
end
redis.call('HSET', KEYS[1], 'status', 'cancelling', 'cancelling_at', ARGV[1])
return 1
