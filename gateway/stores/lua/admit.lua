-- admit.lua: check every limit of one request and, when all pass, take them all (one round trip).
-- Mirrors gateway/stores/memory.py's MemoryStore.admit; the contract tests run over both.
--
-- KEYS[1]  the tenant's ledger hash of the month ("<scope>|cost_usd" = spend so far)
-- KEYS[n]  the windows and lease sets the checks name (only those the rules limit)
-- ARGV[i]  JSON, one per request (requests with the same KEYS share one call):
--          {now, lease_ttl, reserve, id, window, to_next_month,
--                 checks: [[kind, rule_no, key_no, limit], ...]   kind 1 requests, 2 tokens, 3 concurrency
--                 budgets: [[scope, monthly_usd], ...],
--                 want: [requests, tokens, slots] (optional: credit for the caller to spend locally)}
--          A requests or tokens key is a hash (second -> amount, plus t = the total of the live
--          seconds, lo / hi = the oldest / newest second); a concurrency key a sorted set
--          (request id -> lease expiry).
-- Returns, per ARGV entry, {allowed, reason, index, retry_ms, exceeds, lim_req, rem_req, reset_req_ms,
--          lim_tok, rem_tok, reset_tok_ms, budget_room, grant_1, ..., grant_n}; reason 0 none,
--          1 requests, 2 tokens, 3 concurrency, 4 budget; index is the denying rule's (or budget's)
--          1-based number; -1 = none. budget_room is a string: the least of (monthly_usd - spent)
--          over the budgets, "-1" without budgets. grant_i is the credit taken for check i beyond this
--          request (see ../credit.py): units in this second's bucket, or lease slots named
--          "<id>#<n>"; granted only when allowed, on limits of at least 64, and at most a sixteenth
--          of the room left, so credit shrinks to nothing as a limit fills up.

local function admit_one(spec)
  local a = cjson.decode(spec)
  local now, window, reserve = a.now, a.window, a.reserve
  local cur = math.floor(now)
  local oldest_live = cur - window

  -- All live buckets, oldest first (the denial path only: it needs them for Retry-After).
  local function live_buckets(key)
    local flat = redis.call('HGETALL', key)
    local live = {}
    for i = 1, #flat, 2 do
      local bucket = tonumber(flat[i])  -- nil for the meta fields t, lo, hi
      if bucket and bucket >= oldest_live then live[#live + 1] = {bucket, tonumber(flat[i + 1])} end
    end
    table.sort(live, function(x, y) return x[1] < y[1] end)
    return live
  end

  -- The amount in the window, O(1) amortised: the hash keeps its total (t) and its oldest (lo) and
  -- newest (hi) buckets; seconds that left the window are dropped one by one as time passes.
  local function scan(key)
    local meta = redis.call('HMGET', key, 't', 'lo', 'hi')
    local total, lo, hi = tonumber(meta[1]), tonumber(meta[2]), tonumber(meta[3])
    if total == nil or lo == nil or hi == nil then return 0, nil end  -- empty or expired
    if hi < oldest_live then
      redis.call('DEL', key)
      return 0, nil
    end
    if lo < oldest_live then
      local stale = {}
      for b = lo, oldest_live - 1 do stale[#stale + 1] = b end
      local removed = 0
      for _, v in ipairs(redis.call('HMGET', key, unpack(stale))) do removed = removed + (tonumber(v) or 0) end
      redis.call('HDEL', key, unpack(stale))
      total = total - removed
      if total < 0 then total = 0 end
      redis.call('HSET', key, 't', total, 'lo', oldest_live)
    end
    return total, hi
  end

  local function take(key, amount)
    redis.call('HINCRBY', key, cur, amount)
    if redis.call('HINCRBY', key, 't', amount) == amount then redis.call('HSET', key, 'lo', cur) end
    redis.call('HSET', key, 'hi', cur)
    redis.call('EXPIRE', key, window + 2)
  end

  -- Seconds until used + need <= limit as the oldest buckets leave the window.
  local function wait_s(live, used, need, limit)
    local excess, freed = used + need - limit, 0
    for _, entry in ipairs(live) do
      freed = freed + entry[2]
      if freed >= excess then return entry[1] + window + 1 - now end
    end
    return window + 1
  end

  local function reset_s(hi)
    if hi == nil then return 0 end
    return hi + window + 1 - now
  end

  -- The reported reason is the first by priority (budget, requests, tokens, concurrency);
  -- the retry time covers every failure.
  local priority = {[4] = 1, [1] = 2, [2] = 3, [3] = 4}
  local reason, index, retry, exceeds = 0, -1, 0, 0
  local function fail(code, i, wait)
    if reason == 0 or priority[code] < priority[reason] then reason, index = code, i end
    if wait > retry then retry = wait end
  end

  local room = -1
  for j, budget in ipairs(a.budgets) do
    local spent = tonumber(redis.call('HGET', KEYS[1], budget[1] .. '|cost_usd') or '0')
    if spent >= budget[2] then fail(4, j, a.to_next_month) end
    if room < 0 or budget[2] - spent < room then room = budget[2] - spent end
  end

  local req, tok, used_of = {}, {}, {}
  for c, check in ipairs(a.checks) do
    local kind, rule_no, key, limit = check[1], check[2], KEYS[check[3]], check[4]
    if kind == 1 then
      local used, hi = scan(key)
      used_of[c] = used + 1
      req[#req + 1] = {limit, used, hi}
      if used + 1 > limit then fail(1, rule_no, wait_s(live_buckets(key), used, 1, limit)) end
    elseif kind == 2 then
      local used, hi = scan(key)
      used_of[c] = used + reserve
      tok[#tok + 1] = {limit, used, hi}
      if reserve > limit then
        exceeds = 1
        fail(2, rule_no, window)
      elseif used + reserve > limit then
        fail(2, rule_no, wait_s(live_buckets(key), used, reserve, limit))
      end
    else
      redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
      used_of[c] = redis.call('ZCARD', key) + 1
      if used_of[c] - 1 >= limit then
        local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
        local wait = 1
        if #first == 2 then wait = math.min(1, math.max(0, tonumber(first[2]) - now)) end
        fail(3, rule_no, wait)
      end
    end
  end

  -- credit beyond this request: a sixteenth of the room left at most, on limits of 64 or more
  local want = a.want or {0, 0, 0}
  local function grant(c, check)
    local limit, w = check[4], want[check[1]] or 0
    if w <= 0 or limit < 64 then return 0 end
    local g = math.floor((limit - used_of[c]) / 16)
    if g > w then g = w end
    if g < 1 then return 0 end
    return g
  end

  local allowed = reason == 0
  local grants = {}
  if allowed then
    for c, check in ipairs(a.checks) do
      local kind, key = check[1], KEYS[check[3]]
      local g = grant(c, check)
      grants[c] = g
      if kind == 1 then
        take(key, 1 + g)
      elseif kind == 2 then
        if reserve + g > 0 then take(key, reserve + g) end
      else
        local expiry = now + a.lease_ttl
        redis.call('ZADD', key, expiry, a.id)
        for n = 1, g do redis.call('ZADD', key, expiry, a.id .. '#' .. n) end
        local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
        redis.call('EXPIRE', key, math.ceil(tonumber(last[2]) - now) + 1)
      end
    end
  end

  -- headers: the tightest rule of each kind
  local fresh_reset = cur + window + 1 - now
  local function tightest(stats, cost)
    local lim, rem, reset = -1, -1, -1
    local took = allowed and cost > 0
    for _, s in ipairs(stats) do
      local remaining, r = s[1] - s[2], nil
      if took then
        remaining, r = remaining - cost, fresh_reset
      else
        r = reset_s(s[3])
      end
      if remaining < 0 then remaining = 0 end
      if lim < 0 or remaining < rem then lim, rem, reset = s[1], remaining, r end
    end
    return lim, rem, reset
  end

  local function ms(seconds)
    if seconds < 0 then return -1 end
    return math.ceil(seconds * 1000)
  end

  local lim_r, rem_r, reset_r = tightest(req, 1)
  local lim_t, rem_t, reset_t = tightest(tok, reserve)
  local reply = {allowed and 1 or 0, reason, index, ms(retry), exceeds,
                 lim_r, rem_r, ms(reset_r), lim_t, rem_t, ms(reset_t), tostring(room)}
  for c = 1, #a.checks do reply[#reply + 1] = grants[c] or 0 end
  return reply
end

local replies = {}
for i = 1, #ARGV do
  replies[i] = admit_one(ARGV[i])
end
return replies
