"""``kind: llamacpp``: llama.cpp's HTTP server (``llama-server``), read as the OpenAI API.

``/completions`` goes to the native ``POST /completion``; ``/chat/completions`` and ``/embeddings`` go
to llama.cpp's own OpenAI mode (``/v1/...``); ``/responses`` is sent in OpenAI mode, unchanged. The
modules:

- ``adapter``: ``LlamaCppAdapter`` (the routes, health ``/health``, the load page read);
- ``request``: an OpenAI ``/completions`` body as the native ``/completion`` body, and what the
  OpenAI answer cannot carry refused;
- ``answer``: the native answers and ``data:`` events read back as OpenAI's, plain and streamed, the
  OpenAI mode's answers passed with the request's model, and llama.cpp's errors as OpenAI envelopes;
- ``load``: the load read from ``/slots`` or ``/metrics``.
"""

from gateway.adapters.llamacpp.adapter import LlamaCppAdapter

__all__ = ["LlamaCppAdapter"]
