-- Claim up to n lines of one batch: first those whose lease ran out (a gateway died, or a 429 told it
-- to wait) and still have no result, then the next never claimed. A validating batch starts here.
-- KEYS: meta (hash), claims (zset: index -> lease end, ms), results (hash), lines (list)
-- ARGV: now_ms, lease_ms, n, now_s
-- Returns {index, line, index, line, ...}.
local meta, claims, results, lines = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now, lease, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local status = redis.call('HGET', meta, 'status')
if status == 'validating' then
  redis.call('HSET', meta, 'status', 'in_progress', 'in_progress_at', ARGV[4])
  status = 'in_progress'
end
if status ~= 'in_progress' then
  return {}
end
local out = {}
local due = redis.call('ZRANGEBYSCORE', claims, '-inf', now, 'LIMIT', 0, n)
for _, index in ipairs(due) do
  if redis.call('HEXISTS', results, index) == 0 then
    redis.call('ZADD', claims, now + lease, index)
    out[#out + 1] = index
    out[#out + 1] = redis.call('LINDEX', lines, tonumber(index))
  else
    redis.call('ZREM', claims, index)
  end
end
local total = tonumber(redis.call('HGET', meta, 'total'))
while #out < 2 * n do
  local index = tonumber(redis.call('HGET', meta, 'next'))
  if index >= total then
    break
  end
  redis.call('HSET', meta, 'next', index + 1)
  redis.call('ZADD', claims, now + lease, index)
  out[#out + 1] = tostring(index)
  out[#out + 1] = redis.call('LINDEX', lines, index)
end
return out
