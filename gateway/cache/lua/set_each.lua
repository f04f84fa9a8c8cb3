-- Store one value under many keys with one TTL (the affinity map's record: every prefix of a
-- chain -> the replica). One EVALSHA costs a third of a pipeline of SETs on the client.
-- KEYS = the keys, ARGV[1] = the value, ARGV[2] = TTL in milliseconds. Returns the number of keys.
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return #KEYS
