"""Refuse, never silently drop, the fields of features this engine does not serve yet.

An agent that sends audio or legacy ``functions`` and gets prose back has no way to tell that the
field was ignored; a 400 ``unsupported_parameter`` naming the field tells it (and its gateway) to send
such requests to a pool that serves them. The no-op value passes: ``modalities: ["text"]``. So are
``reasoning_effort``, ``verbosity``, ``web_search_options`` and ``moderation`` refused. Structured
outputs (``response_format``, ``structured_outputs``, ``guided_*``) are served (``params.py``). Tool
calling is served (``tools/``); its deprecated form (``functions``, ``function_call``) is refused with
the field to send instead. Other unknown fields stay accepted and ignored (OpenAI adds fields often).
"""

from __future__ import annotations

from typing import NoReturn

from backends.serving.errors import UnsupportedParameter
from backends.serving.protocol import ChatCompletionRequest, CompletionRequest

LEGACY_FUNCTION_FIELDS = {"functions": "tools", "function_call": "tool_choice"}
"""OpenAI's deprecated function calling, and the field that replaces each."""
AUDIO = "audio input and output"
UNSERVED = {
    "reasoning_effort": "reasoning effort (its models do not reason)",
    "verbosity": "a verbosity setting",
    "web_search_options": "web search",
    "moderation": "moderation of input and output",
}
"""Chat fields of features no model of this engine has, refused whatever their value but null."""


def refuse_unsupported(request: ChatCompletionRequest | CompletionRequest) -> None:
    """Raise ``UnsupportedParameter`` naming the first field that asks for a feature not served yet."""
    if isinstance(request, ChatCompletionRequest):
        for field, replacement in LEGACY_FUNCTION_FIELDS.items():
            if getattr(request, field) is not None:
                raise UnsupportedParameter(
                    f"Unsupported parameter: '{field}'. The deprecated function-calling fields are not "
                    f"served; send '{replacement}' instead (the same functions as tools of type "
                    '"function").',
                    param=field,
                )
        if isinstance(request.modalities, list) and "audio" in request.modalities:
            _refuse("modalities", AUDIO)
        if request.audio is not None:
            _refuse("audio", AUDIO)
        for field, feature in UNSERVED.items():
            if getattr(request, field) is not None:
                _refuse(field, feature)


def _refuse(param: str, feature: str) -> NoReturn:
    raise UnsupportedParameter(
        f"Unsupported parameter: '{param}'. The reference engine does not support {feature}; "
        "route such requests to a pool that does.",
        param=param,
    )
