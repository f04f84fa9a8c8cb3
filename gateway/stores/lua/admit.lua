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
--          of the room left, so credit shrinks to nothing as a limit fills up. Credit is taken after
--          every request of the call has been judged: one replica's credit never denies its own
--          requests sent beside it.

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

  local req, tok = {}, {}
  for _, check in ipairs(a.checks) do
    local kind, rule_no, key, limit = check[1], check[2], KEYS[check[3]], check[4]
    if kind == 1 then
      local used, hi = scan(key)
      req[#req + 1] = {limit, used, hi}
      if used + 1 > limit then fail(1, rule_no, wait_s(live_buckets(key), used, 1, limit)) end
    elseif kind == 2 then
      local used, hi = scan(key)
      tok[#tok + 1] = {limit, used, hi}
      if reserve > limit then
        exceeds = 1
        fail(2, rule_no, window)
      elseif used + reserve > limit then
        fail(2, rule_no, wait_s(live_buckets(key), used, reserve, limit))
      end
    else
      redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
      if redis.call('ZCARD', key) >= limit then
        local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
        local wait = 1
        if #first == 2 then wait = math.min(1, math.max(0, tonumber(first[2]) - now)) end
        fail(3, rule_no, wait)
      end
    end
  end

  local allowed = reason == 0
  if allowed then
    for _, check in ipairs(a.checks) do
      local kind, key = check[1], KEYS[check[3]]
      if kind == 1 then
        take(key, 1)
      elseif kind == 2 then
        if reserve > 0 then take(key, reserve) end
      else
        redis.call('ZADD', key, now + a.lease_ttl, a.id)
        local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
        redis.call('EXPIRE', key, math.ceil(tonumber(last[2]) - now) + 1)
      end
    end
  end

  -- credit beyond this request: a sixteenth of the room left at most, on limits of 64 or more; taken
  -- once every request of this call has been judged, so a grant never denies a request beside it
  local take_credit = nil
  if allowed and a.want then
    take_credit = function()
      local grants = {}
      for c, check in ipairs(a.checks) do
        local kind, key, limit, w = check[1], KEYS[check[3]], check[4], a.want[check[1]] or 0
        local g = 0
        if w > 0 and limit >= 64 then
          local used
          if kind == 3 then used = redis.call('ZCARD', key) else used = scan(key) end
          g = math.max(0, math.min(w, math.floor((limit - used) / 16)))
        end
        grants[c] = g
        if g > 0 and kind == 3 then
          local expiry = now + a.lease_ttl  -- as this request's own lease: the key's TTL covers it
          for n = 1, g do redis.call('ZADD', key, expiry, a.id .. '#' .. n) end
        elseif g > 0 then
          take(key, g)
        end
      end
      return grants
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
  for _ = 1, #a.checks do reply[#reply + 1] = 0 end  -- credit: filled in below
  return reply, take_credit
end

local replies, credit = {}, {}
for i = 1, #ARGV do
  replies[i], credit[i] = admit_one(ARGV[i])
end
for i = 1, #ARGV do
  if credit[i] then
    for c, granted in ipairs(credit[i]()) do replies[i][12 + c] = granted end
  end
end
return replies
