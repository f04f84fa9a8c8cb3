-- Who writes the output files: one caller, when every line has a result (completed), the window is
-- past (expired) or a cancelled batch has no line in flight (cancelled). A finalizer silent for a
-- lease is taken over.
-- KEYS: meta (hash), claims (zset)
-- ARGV: now_ms, lease_ms, now_s, is_expired ('1' or '0')
-- Returns the final status this caller must write, or false.
local meta, claims = KEYS[1], KEYS[2]
local now, lease = tonumber(ARGV[1]), tonumber(ARGV[2])
local status = redis.call('HGET', meta, 'status')
if status == 'finalizing' then
  local since = tonumber(redis.call('HGET', meta, 'finalizing_ms') or '0')
  if since + lease > now then
    return false
  end
  redis.call('HSET', meta, 'finalizing_ms', now)
  return redis.call('HGET', meta, 'final')
end
if status ~= 'validating' and status ~= 'in_progress' and status ~= 'cancelling' then
  return false
end
local done = tonumber(redis.call('HGET', meta, 'completed')) + tonumber(redis.call('HGET', meta, 'failed'))
local final
if done >= tonumber(redis.call('HGET', meta, 'total')) then
  final = 'completed'
elseif ARGV[4] == '1' then
  final = 'expired'
elseif status == 'cancelling' and redis.call('ZCOUNT', claims, '(' .. now, '+inf') == 0 then
  final = 'cancelled'
else
  return false
end
redis.call('HSET', meta, 'status', 'finalizing', 'final', final, 'finalizing_ms', now, 'finalizing_at', ARGV[3])
return final
