"""``kind: ollama``: Ollama's native API, read back as the OpenAI one.

``/chat/completions`` goes to ``POST /api/chat``, ``/completions`` to ``POST /api/generate`` (raw),
``/embeddings`` to ``POST /api/embed``; ``/responses`` is refused. The modules:

- ``adapter``: ``OllamaAdapter`` (the routes, health ``/api/version``, the load read from ``/api/ps``);
- ``request``: an OpenAI body as the native request, sampling in ``options``, and what Ollama cannot
  honour refused;
- ``answer``: native answers, NDJSON streams, embeddings and error bodies read back as OpenAI's.
"""

from gateway.adapters.ollama.adapter import OllamaAdapter
from gateway.adapters.ollama.request import COMPLETION_MAX_TOKENS

__all__ = ["COMPLETION_MAX_TOKENS", "OllamaAdapter"]
