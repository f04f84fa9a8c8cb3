-- Store one key record with its audit entry, unless another write got there first.
-- KEYS: records (hash name -> record JSON), version (counter), audit (list, newest first)
-- ARGV: name, record JSON, the revision the writer read (0: the key must not exist), audit JSON,
--       the audit list's length bound
-- Returns 1 when stored, 0 on a conflict.
local current = redis.call('HGET', KEYS[1], ARGV[1])
local read_revision = tonumber(ARGV[3])
if current then
  if cjson.decode(current)['revision'] ~= read_revision then
    return 0
  end
elseif read_revision ~= 0 then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('INCR', KEYS[2])
redis.call('LPUSH', KEYS[3], ARGV[4])
redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[5]) - 1)
return 1
