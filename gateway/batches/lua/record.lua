-- Write one line's result, once: a line with a result is never claimed again.
-- KEYS: meta (hash), claims (zset), results (hash)
-- ARGV: index, result, counter ('completed' or 'failed')
-- Returns 1 when written, 0 when the line had a result or the batch is past recording.
local meta, claims, results = KEYS[1], KEYS[2], KEYS[3]
local status = redis.call('HGET', meta, 'status')
if status ~= 'in_progress' and status ~= 'cancelling' then
  return 0
end
if redis.call('HSETNX', results, ARGV[1], ARGV[2]) == 0 then
  return 0
end
redis.call('ZREM', claims, ARGV[1])
redis.call('HINCRBY', meta, ARGV[3], 1)
return 1
