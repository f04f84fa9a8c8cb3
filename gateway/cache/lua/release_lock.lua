-- Release a single-flight lock only if we still hold it (a lock that expired and was taken by
-- another leader must not be deleted by the old one).
-- KEYS[1] = lock key, ARGV[1] = our token. Returns 1 if released, 0 if not ours (or gone).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
