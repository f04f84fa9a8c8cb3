"""The engine's error tree.

    EngineError
    ├── QueueFullError      the async front's waiting queue is full (HTTP 429 upstream)
    ├── ModelLoadError      weights, config or tokenizer could not be read
    └── EngineDeadError     the background step thread died; every request fails
        └── EngineStopped   the engine was stopped (the server shuts down); open streams end with it

Bad request input raises the built-in ``ValueError`` (HTTP 400 upstream), naming the field;
``PromptTooLong``, one of them, is a prompt the context or the whole KV cache cannot hold (400
``context_length_exceeded``).
"""

from __future__ import annotations


class EngineError(Exception):
    """Base of every error the engine raises on its own account."""


class QueueFullError(EngineError):
    """Raised at once by ``AsyncLLMEngine.generate`` when ``max_waiting`` requests already wait."""


class ModelLoadError(EngineError):
    """The model files are missing, malformed or of an unsupported architecture."""


class EngineDeadError(EngineError):
    """The engine's step loop failed; the message carries the original error."""


class EngineStopped(EngineDeadError):
    """``AsyncLLMEngine.stop`` ended the step loop: nothing failed, so the server answers 503 (retry
    elsewhere) rather than 500. A subclass, so callers that only know ``EngineDeadError`` still catch it."""


class PromptTooLong(ValueError):
    """The prompt does not fit the model's context, or the whole KV cache, with one generated token."""
