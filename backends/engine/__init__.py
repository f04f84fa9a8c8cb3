"""The reference inference engine: paged KV cache, continuous batching, prefix caching.

The shape follows nano-vllm: ``LLMEngine.step()`` is schedule -> run -> postprocess.
"""

from backends.engine.config import EngineConfig
from backends.engine.errors import EngineDeadError, EngineError, ModelLoadError, QueueFullError
from backends.engine.outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput
from backends.engine.sampling_params import SamplingParams

__all__ = [
    "CompletionOutput",
    "EngineConfig",
    "EngineDeadError",
    "EngineError",
    "Logprob",
    "ModelLoadError",
    "QueueFullError",
    "RequestMetrics",
    "RequestOutput",
    "SamplingParams",
]
