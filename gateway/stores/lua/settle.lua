-- settle.lua: the request ended; real usage replaces its token reservation, its leases are released
-- and the ledger is updated (one round trip). A second settle of the same request id is a no-op.
-- Mirrors gateway/stores/memory.py's MemoryStore.settle.
--
-- KEYS[1]  settled-marker set (ids of the requests reserved in one minute)
-- KEYS[2]  the tenant's ledger hash of the month
-- KEYS[n]  the tokens windows and lease sets the rules name
-- ARGV[i]  JSON, one per request (requests with the same KEYS share one call):
--          {id, marker_ttl, bucket, delta, oldest_live (-1: do not check), input, output, cost,
--                 ledger_ttl, scopes: ["tenant", "key:<id>", "pool:<pool>"],
--                 tokens: [key_no, ...], leases: [key_no, ...]}
-- Returns, per ARGV entry, 1 when settled now, 0 when it had been settled already.

local function settle_one(spec)
  local a = cjson.decode(spec)
  if redis.call('SADD', KEYS[1], a.id) == 0 then return 0 end
  redis.call('EXPIRE', KEYS[1], a.marker_ttl)

  -- the reservation becomes the real usage, in the bucket it was made in, while that is in the window
  if a.delta ~= 0 and (a.oldest_live < 0 or a.bucket >= a.oldest_live) then
    for _, key_no in ipairs(a.tokens) do
      local held = redis.call('HGET', KEYS[key_no], a.bucket)
      if held then
        local value = tonumber(held) + a.delta
        if value < 0 then value = 0 end
        redis.call('HSET', KEYS[key_no], a.bucket, value)
        redis.call('HINCRBY', KEYS[key_no], 't', value - tonumber(held))  -- the window's running total
      end
    end
  end
  for _, key_no in ipairs(a.leases) do
    redis.call('ZREM', KEYS[key_no], a.id)
  end

  local ledger = KEYS[2]
  for _, scope in ipairs(a.scopes) do
    redis.call('HINCRBY', ledger, scope .. '|requests', 1)
    redis.call('HINCRBY', ledger, scope .. '|input_tokens', a.input)
    redis.call('HINCRBY', ledger, scope .. '|output_tokens', a.output)
    redis.call('HINCRBYFLOAT', ledger, scope .. '|cost_usd', a.cost)
  end
  redis.call('EXPIRE', ledger, a.ledger_ttl)
  return 1
end

local replies = {}
for i = 1, #ARGV do
  replies[i] = settle_one(ARGV[i])
end
return replies
