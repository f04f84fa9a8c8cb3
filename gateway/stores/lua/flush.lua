-- flush.lua: what one gateway replica settled locally since its last flush, for one tenant, in one
-- round trip (see ../credit.py). Usage is added to the ledgers, token windows are adjusted to the real
-- usage (and unspent credit handed back), and lease slots no longer held are released.
--
-- KEYS     the ledgers, windows and lease sets named below (one tenant: one Cluster slot)
-- ARGV[i]  JSON, one per flush (flushes with the same KEYS share one call): {ledger_ttl,
--                ledgers: [[key_no, {field: integer}, {field: "float"}], ...],
--                adjust: [[key_no, bucket, delta], ...],    a window's bucket changes by delta
--                release: [[key_no, member, ...], ...]}      members leave a lease set
-- A bucket that has left the window (dropped by admit.lua's scan, or the whole key expired) is not
-- touched: it no longer counts, so neither does a change to it.
-- Returns, per ARGV entry, 1.

local function flush_one(spec)
  local a = cjson.decode(spec)

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
