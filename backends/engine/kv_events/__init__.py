"""KV-cache events in vLLM's format (``events.py``), published over ZeroMQ with replay (``publisher.py``),
configured as vLLM's ``--kv-events-config`` (``config.py``). See docs/engine.md, "KV-cache events"."""
