-- finalizing -> the final status, with the output files; the lines, claims and results go.
-- KEYS: meta (hash), claims (zset), results (hash), lines (list)
-- ARGV: final, now_s, output_file_id ('' for none), error_file_id ('' for none)
-- Returns 1 when this caller finished it, 0 when it was not finalizing (another did).
local meta = KEYS[1]
if redis.call('HGET', meta, 'status') ~= 'finalizing' then
  return 0
end
redis.call('HSET', meta, 'status', ARGV[1], ARGV[1] .. '_at', ARGV[2])
if ARGV[3] ~= '' then
  redis.call('HSET', meta, 'output_file_id', ARGV[3])
end
if ARGV[4] ~= '' then
  redis.call('HSET', meta, 'error_file_id', ARGV[4])
end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
return 1
