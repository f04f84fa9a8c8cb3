"""KV-cache-aware replica picks: engines say which KV blocks they hold, the gateway routes by it.

``events`` decodes vLLM's KV-event batches, ``subscriber`` follows each replica's ZeroMQ stream (gaps
replayed), ``index`` keeps which replica holds which blocks under the gateway's own chain hashes,
``tokenizer`` turns a request into the engine's token ids, ``scorer`` weighs held blocks against load,
and ``router`` puts them together for the pick stage (``gateway.stages.pick``). The policy is
``kv_routing:`` (``gateway.policy.kv_events``); docs/routing.md explains it.
"""
