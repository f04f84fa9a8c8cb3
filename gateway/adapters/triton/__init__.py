"""``kind: triton``: NVIDIA Triton Inference Server's generate extension, in front of TensorRT-LLM.

Chat and text completions go to ``POST /v2/models/{model}/generate`` (``/generate_stream`` for a
stream) with the TensorRT-LLM ensemble's inputs; ``/embeddings`` and ``/responses`` are refused. The
modules:

- ``adapter``: ``TritonAdapter`` (the routes, health ``/v2/health/ready``);
- ``request``: an OpenAI body as the ensemble's inputs (a chat rendered in the replica's template),
  and what the ensemble cannot honour refused;
- ``answer``: the generate answer, its SSE stream and its errors read back as OpenAI's;
- ``load``: ``parse_triton_metrics``, the load read from Triton's metrics page.
"""

from gateway.adapters.triton.adapter import TritonAdapter
from gateway.adapters.triton.load import parse_triton_metrics
from gateway.adapters.triton.request import DEFAULT_COMPLETION_MAX_TOKENS

__all__ = ["DEFAULT_COMPLETION_MAX_TOKENS", "TritonAdapter", "parse_triton_metrics"]
