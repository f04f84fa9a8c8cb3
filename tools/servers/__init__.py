"""Servers a test or a benchmark starts on a loopback port, shared by ``tests/`` and ``bench/``.

One a module: ``redis_server`` (a real Redis: ``REDIS_URL``, testcontainers, or a binary we start),
``fake_upstream`` (a fake OpenAI-compatible upstream whose behaviour the model name picks; its vLLM-only
routes are ``fake_vllm``), ``gateway_server`` (the gateway under uvicorn in a background thread, and the
fake upstream's policy) and ``gateway_process`` (the gateway as its own process). Nothing in the gateway
or the engine imports them.
"""
