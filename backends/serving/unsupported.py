"""Refuse, never silently drop, the fields of features this engine does not serve yet.

An agent that sends ``tools`` or ``response_format`` and gets prose back has no way to tell that the
field was ignored; a 400 ``unsupported_parameter`` naming the field tells it (and its gateway) to send
such requests to a pool that serves them. The no-op values pass: ``tools: []``, ``tool_choice: "none"``
(a ``tools`` list with it too: the model is told not to call them), ``response_format: {"type": "text"}``
and ``modalities: ["text"]``. Other unknown fields stay accepted and ignored (OpenAI adds fields often).
"""

from __future__ import annotations

from typing import Any, NoReturn

from backends.serving.errors import UnsupportedParameter
from backends.serving.protocol import ChatCompletionRequest, CompletionRequest

TOOL_CALLING = "tool calling"
STRUCTURED_OUTPUTS = "structured outputs"
AUDIO = "audio input and output"

GUIDED_FIELDS = ("structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar")
"""vLLM's structured-output fields (``structured_outputs`` and the older ``guided_*``)."""


def refuse_unsupported(request: ChatCompletionRequest | CompletionRequest) -> None:
    """Raise ``UnsupportedParameter`` naming the first field that asks for a feature not served yet."""
    if isinstance(request, ChatCompletionRequest):
        declines_tools = request.tool_choice == "none"
        if request.tools not in (None, []) and not declines_tools:
            _refuse("tools", TOOL_CALLING)
        if request.tool_choice is not None and not declines_tools:
            _refuse("tool_choice", TOOL_CALLING)
        if isinstance(request.modalities, list) and "audio" in request.modalities:
            _refuse("modalities", AUDIO)
        if request.audio is not None:
            _refuse("audio", AUDIO)
    if request.response_format is not None and not _is_text_format(request.response_format):
        _refuse("response_format", STRUCTURED_OUTPUTS)
    for field in GUIDED_FIELDS:
        if getattr(request, field) is not None:
            _refuse(field, STRUCTURED_OUTPUTS)


def _is_text_format(response_format: Any) -> bool:
    """``{"type": "text"}``: plain text, what the engine answers anyway."""
    return isinstance(response_format, dict) and response_format.get("type") == "text"


def _refuse(param: str, feature: str) -> NoReturn:
    raise UnsupportedParameter(
        f"Unsupported parameter: '{param}'. The reference engine does not support {feature} yet "
        "(tool calling and structured outputs are not implemented); route such requests to a pool "
        "that does (e.g. vLLM).",
        param=param,
    )
