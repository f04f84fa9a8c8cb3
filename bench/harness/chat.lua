-- wrk script for bench/overhead.py: POST one small chat completion request on every call.
-- Settings come from the environment so one script serves every target and endpoint:
--   BENCH_MODEL    the "model" field (default "bench")
--   BENCH_STREAM   "1" adds "stream": true
--   BENCH_API_KEY  sent as "Authorization: Bearer <key>" when set
--   BENCH_TEMPERATURE  adds "temperature": <value> (0 makes the request cacheable: the cache-hit path)
--   BENCH_ACCEPT_ENCODING  sent as "Accept-Encoding" when set (wrk reads the encoded bytes as they come)
--   BENCH_UNIQUE   "1" makes every body differ (a counter in the prompt): with temperature 0, each
--                  request is a response-cache miss that goes upstream and stores its entry
--   BENCH_API      "messages": the same request in Anthropic's Messages format, its key in x-api-key
-- done() prints one JSON line (marker BENCH_WRK_RESULT) that the driver parses: exact microsecond
-- percentiles and the error counts, rather than scraping wrk's rounded text.

local model = os.getenv("BENCH_MODEL") or "bench"
local stream = os.getenv("BENCH_STREAM") == "1"
local api_key = os.getenv("BENCH_API_KEY") or ""
local temperature = os.getenv("BENCH_TEMPERATURE")
local accept_encoding = os.getenv("BENCH_ACCEPT_ENCODING") or ""

local is_messages = os.getenv("BENCH_API") == "messages"
local body = '{"model":"' .. model .. '","messages":[{"role":"user","content":"Say hello in one short sentence."}],'
  .. '"max_tokens":32'
if temperature then
  body = body .. ',"temperature":' .. temperature
end
if stream then
  body = body .. (is_messages and ',"stream":true' or ',"stream":true,"stream_options":{"include_usage":true}')
end
body = body .. '}'

wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = "application/json"
if os.getenv("BENCH_UNIQUE") == "1" then
  local head, tail = body:match('^(.-Say hello in one short sentence)(.*)$')
  math.randomseed(os.time())
  local run = math.random(1, 2147483647)  -- bodies of one run never repeat another run's
  local counter = 0
  request = function()
    counter = counter + 1
    return wrk.format(nil, nil, nil, head .. " #" .. run .. "-" .. counter .. tail)
  end
end
if api_key ~= "" and is_messages then
  wrk.headers["x-api-key"] = api_key
  wrk.headers["anthropic-version"] = "2023-06-01"
elseif api_key ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. api_key
end
if accept_encoding ~= "" then
  wrk.headers["Accept-Encoding"] = accept_encoding
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_WRK_RESULT {"requests":%d,"duration_us":%d,"bytes":%d,'
      .. '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},'
      .. '"latency_us":{"mean":%.2f,"max":%d,"p50":%d,"p75":%d,"p90":%d,"p99":%d}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.mean, latency.max,
    latency:percentile(50), latency:percentile(75), latency:percentile(90), latency:percentile(99)))
end
