"""``kind: tgi``: Hugging Face text-generation-inference (2.3 and later): native text API, Messages API.

``/completions`` goes to TGI's native ``POST /generate_stream``, ``/chat/completions`` to its Messages
API (``POST /v1/chat/completions``); ``/embeddings`` and ``/responses`` are refused. The modules:

- ``adapter``: ``TgiAdapter`` (the routes, health ``/health``) and ``parse_tgi_metrics``, the load
  read from ``/metrics``;
- ``request``: an OpenAI body as ``/generate_stream``'s parameters or as a Messages API body, and
  what TGI cannot do refused;
- ``answer``: ``/generate_stream``'s events and the Messages API's answers read back as OpenAI's,
  plain and streamed;
- ``errors``: TGI's error bodies and error events as OpenAI error envelopes.
"""

from gateway.adapters.tgi.adapter import TgiAdapter, parse_tgi_metrics
from gateway.adapters.tgi.request import DEFAULT_COMPLETION_MAX_TOKENS

__all__ = ["DEFAULT_COMPLETION_MAX_TOKENS", "TgiAdapter", "parse_tgi_metrics"]
