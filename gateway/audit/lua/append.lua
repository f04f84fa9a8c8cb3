-- Append one audit entry, unless another writer extended the chain since this one read its tail.
-- KEYS: the chain (a list, oldest first: element i is the entry with seq i)
-- ARGV: the entry's seq, the hash it chains to (prev), the entry JSON
-- Returns 1 when appended, 0 when the tail moved (read it again and re-chain).
local length = redis.call('LLEN', KEYS[1])
if length ~= tonumber(ARGV[1]) then
  return 0
end
if length > 0 then
  local tail = cjson.decode(redis.call('LINDEX', KEYS[1], -1))
  if tail['hash'] ~= ARGV[2] then
    return 0
  end
end
redis.call('RPUSH', KEYS[1], ARGV[3])
return 1
