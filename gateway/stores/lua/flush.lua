-- flush.lua: what one gateway replica settled locally since its last flush, for one tenant, in one
-- round trip (see ../credit.py). Usage is added to the ledgers, token windows are adjusted to the real
-- usage (and unspent credit handed back), held leases are renewed, and lease slots no longer held are
-- released.
--
-- KEYS[1]  the set of write ids applied this minute (a write sent again is applied once)
-- KEYS     the ledgers, windows and lease sets named below (one tenant: one Cluster slot)
-- ARGV[i]  JSON, one per flush (flushes with the same KEYS share one call): {id, written_ttl, now,
--                ledger_ttl,
--                ledgers: [[key_no, {field: integer}, {field: "float"}], ...],
--                adjust: [[key_no, bucket, delta], ...],    a window's bucket changes by delta
--                renew: [[key_no, member, expiry, ...], ...] leases still in the set get a later expiry
--                release: [[key_no, member, ...], ...]}      members leave a lease set
-- A write whose id was applied already (it timed out on the replica, which sent it again, but ran
-- when Redis resumed) changes nothing. A bucket that has left the window (dropped by admit.lua's scan,
-- or the whole key expired) is not touched: it no longer counts, so neither does a change to it.
-- Renewing never takes a lease back: one that expired or is gone stays gone.
-- Returns, per ARGV entry, 1 when applied now, 0 when it had been applied already.

local function flush_one(spec)
  local a = cjson.decode(spec)
  if redis.call('SADD', KEYS[1], a.id) == 0 then return 0 end
  redis.call('EXPIRE', KEYS[1], a.written_ttl)

  for _, entry in ipairs(a.ledgers) do
    local ledger = KEYS[entry[1]]
    for field, amount in pairs(entry[2]) do redis.call('HINCRBY', ledger, field, amount) end
    for field, amount in pairs(entry[3]) do redis.call('HINCRBYFLOAT', ledger, field, amount) end
    redis.call('EXPIRE', ledger, a.ledger_ttl)
  end

  for _, entry in ipairs(a.adjust) do
    local key, bucket, delta = KEYS[entry[1]], entry[2], entry[3]
    local held = redis.call('HGET', key, bucket)
    if held then
      local value = tonumber(held) + delta
      if value < 0 then value = 0 end
      redis.call('HSET', key, bucket, value)
      redis.call('HINCRBY', key, 't', value - tonumber(held))  -- the window's running total
    end
  end

  for _, entry in ipairs(a.renew) do
    local key, last = KEYS[entry[1]], nil
    for i = 2, #entry, 2 do
      local member, expiry = entry[i], entry[i + 1]
      local held = tonumber(redis.call('ZSCORE', key, member))
      if held and held > a.now and held < expiry then
        redis.call('ZADD', key, expiry, member)
        if last == nil or expiry > last then last = expiry end
      end
    end
    if last then
      local ttl = math.ceil(last - a.now) + 1
      if redis.call('TTL', key) < ttl then redis.call('EXPIRE', key, ttl) end
    end
  end

  for _, entry in ipairs(a.release) do
    local key = KEYS[entry[1]]
    for i = 2, #entry do redis.call('ZREM', key, entry[i]) end
  end
  return 1
end

local replies = {}
for i = 1, #ARGV do
  replies[i] = flush_one(ARGV[i])
end
return replies
