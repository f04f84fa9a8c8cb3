"""Sortyard's shared library: the small, torch-free pieces both the gateway (``gateway``) and the engine
server (``backends.serving``) import, so the two processes agree without either importing the other.

``sortyard.telemetry``: span and attribute names (``semconv``), W3C ``traceparent`` (``traceparent``),
where spans go and the tracer provider (``exporter``), the SERVER span that continues a caller's trace
(``server_span``). ``sortyard.openai_errors``: OpenAI's ``{"error": {...}}`` envelope.

It imports neither ``gateway`` nor ``backends`` (an import-linter contract in pyproject.toml) and needs
only the gateway's run-time dependencies.
"""
