"""The Messages API's request, as msgspec Structs: what is validated, and what the OpenAPI document shows.

``null`` means left out wherever a field is optional. A body that does not fit is a 400 naming the field
(``gateway.schemas.decode_as``); what fits but no chat server can honour is refused in ``request.py``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, TypeVar

import msgspec

from gateway.errors import InvalidJSON, InvalidRequest
from gateway.schemas import json_number

__all__ = [
    "AssistantBlock",
    "AssistantMessage",
    "CountTokensRequest",
    "ImageBlock",
    "Message",
    "MessagesRequest",
    "TextBlock",
    "Tool",
    "ToolChoice",
    "ToolResultBlock",
    "ToolUseBlock",
    "UserBlock",
    "UserMessage",
    "convert_request",
    "parse_json",
]

NonEmptyStr = Annotated[str, msgspec.Meta(min_length=1)]
UnitInterval = Annotated[float, msgspec.Meta(ge=0, le=1)]


_CACHE = dict[str, Any] | None
"""A block's ``cache_control``: a prompt-cache breakpoint; the engines cache prefixes on their own."""


class TextBlock(msgspec.Struct, tag_field="type", tag="text"):
    text: str
    cache_control: _CACHE = None
    citations: Any = None


class PlainText(msgspec.Struct):
    """A text block where only text may stand (``system``, a tool result's content): its ``type`` is a
    plain field, which msgspec checks, where a lone tagged struct would take a body without it."""

    type: Literal["text"]
    text: str
    cache_control: _CACHE = None
    citations: Any = None


class Base64Source(msgspec.Struct, tag_field="type", tag="base64"):
    media_type: str
    data: str


class UrlSource(msgspec.Struct, tag_field="type", tag="url"):
    url: str


class ImageBlock(msgspec.Struct, tag_field="type", tag="image"):
    source: Base64Source | UrlSource
    cache_control: _CACHE = None


class ToolUseBlock(msgspec.Struct, tag_field="type", tag="tool_use"):
    id: str
    name: str
    input: dict[str, Any]
    cache_control: _CACHE = None


class ToolResultBlock(msgspec.Struct, tag_field="type", tag="tool_result"):
    tool_use_id: NonEmptyStr
    content: str | list[PlainText] = ""
    is_error: bool = False
    cache_control: _CACHE = None


class ThinkingBlock(msgspec.Struct, tag_field="type", tag="thinking"):
    thinking: str = ""
    signature: str = ""


class RedactedThinkingBlock(msgspec.Struct, tag_field="type", tag="redacted_thinking"):
    data: str = ""


UserBlock = TextBlock | ImageBlock | ToolResultBlock
AssistantBlock = TextBlock | ToolUseBlock | ThinkingBlock | RedactedThinkingBlock


class UserMessage(msgspec.Struct, tag_field="role", tag="user"):
    content: str | Annotated[list[UserBlock], msgspec.Meta(min_length=1)]


class AssistantMessage(msgspec.Struct, tag_field="role", tag="assistant"):
    content: str | Annotated[list[AssistantBlock], msgspec.Meta(min_length=1)]


Message = UserMessage | AssistantMessage


TOOL_NAME = r"^[A-Za-z0-9_.-]{1,64}$"
"""A tool name as the chat servers behind take it (the reference engine's rule: OpenAI's letters, digits,
``_`` and ``-``, up to 64, and ``.``, which MCP servers use). Checked here, a bad name is the same 400 on
both routes whatever the pool serves, ``count_tokens`` included (it calls no server)."""
ObjectSchema = Annotated[
    dict[str, Any], msgspec.Meta(extra_json_schema={"properties": {"type": {"const": "object"}}})
]
"""A JSON Schema of type ``object`` (a function takes named arguments); ``type`` left out means it.
msgspec checks that it is an object, ``request.py`` its ``type``."""


class Tool(msgspec.Struct):
    """A client tool (a server tool, ``web_search_...`` or ``bash_...``, is refused before: request.py)."""

    name: Annotated[str, msgspec.Meta(pattern=TOOL_NAME)]
    input_schema: ObjectSchema
    description: str | None = None
    type: Literal["custom"] | None = None
    cache_control: dict[str, Any] | None = None


class _Choice(msgspec.Struct, tag_field="type", forbid_unknown_fields=True):
    disable_parallel_tool_use: bool | None = None


class ChooseAuto(_Choice, tag="auto"):
    pass


class ChooseAny(_Choice, tag="any"):
    pass


class ChooseNone(_Choice, tag="none"):
    pass


class ChooseTool(msgspec.Struct, tag_field="type", tag="tool", forbid_unknown_fields=True):
    name: str
    disable_parallel_tool_use: bool | None = None


ToolChoice = ChooseAuto | ChooseAny | ChooseNone | ChooseTool


class Metadata(msgspec.Struct):
    user_id: str | None = None


class ThinkingDisabled(msgspec.Struct, forbid_unknown_fields=True):
    """The one ``thinking`` a model that does not reason can honour (the others are refused before)."""

    type: Literal["disabled"]


class JsonOutputFormat(msgspec.Struct):
    type: Literal["json_schema"]
    schema: dict[str, Any]


class OutputConfig(msgspec.Struct, forbid_unknown_fields=True):
    """``format`` only: an ``effort`` is refused before (the model does not reason)."""

    format: JsonOutputFormat | None = None


class _Request(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    model: NonEmptyStr
    messages: Annotated[list[Message], msgspec.Meta(min_length=1)]
    system: str | list[PlainText] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingDisabled | None = None
    output_config: OutputConfig | None = None
    output_format: JsonOutputFormat | None = None
    # hints that never change the output (the engines cache prefixes on their own; capacity, attribution)
    cache_control: dict[str, Any] | None = None
    service_tier: str | None = None
    speed: str | None = None
    user_profile_id: str | None = None
    workspace_id: str | None = None


class MessagesRequest(_Request, kw_only=True):
    """``POST /v1/messages``."""

    max_tokens: Annotated[int, msgspec.Meta(ge=1)]
    metadata: Metadata | None = None
    stop_sequences: list[NonEmptyStr] | None = None
    stream: bool | None = None
    temperature: UnitInterval | None = None
    top_p: UnitInterval | None = None
    top_k: Annotated[int, msgspec.Meta(ge=0)] | None = None


class CountTokensRequest(_Request, kw_only=True):
    """``POST /v1/messages/count_tokens``: the request without what only generation needs."""


R = TypeVar("R", MessagesRequest, CountTokensRequest)
_decoder = msgspec.json.Decoder(float_hook=json_number)  # 8.0 is the integer 8, as JSON Schema counts
_AT = re.compile(r" - at `\$\.?(?P<path>[^`]*)`$")
_INDEX = re.compile(r"\[(\d+)\]")


def _dotted(path: str) -> str:
    """msgspec's ``messages[0].content`` as Anthropic writes it: ``messages.0.content``."""
    return _INDEX.sub(r".\1", path).lstrip(".")


def parse_json(raw: bytes) -> Any:
    """The body's JSON; a 400 ``invalid_json`` when it is none."""
    if not raw:
        raise InvalidJSON("The request body is empty; expected a JSON object.")
    try:
        return _decoder.decode(raw)
    except msgspec.DecodeError:
        raise InvalidJSON("The request body is not valid JSON.") from None
    except RecursionError:  # msgspec gives up near depth 1,000: a bad body, not a server fault
        raise InvalidJSON("The request body is nested too deeply.") from None


def convert_request(document: Any, kind: type[R]) -> R:
    """The decoded body as ``kind``; a 400 whose ``param`` (and message) name the field as Anthropic does."""
    try:
        return msgspec.convert(document, kind)
    except RecursionError:
        raise InvalidJSON("The request body is nested too deeply.") from None
    except msgspec.ValidationError as error:
        text = str(error)
        match = _AT.search(text)
        path = _dotted(match.group("path")) if match else ""
        what = text[: match.start()] if match else text
        named = re.match(r"Object (?:missing required|contains unknown) field `(?P<field>[^`]+)`", what)
        if named:
            path = f"{path}.{named.group('field')}" if path else named.group("field")
            what = "Field required" if "missing" in what else "Extra inputs are not permitted"
        raise InvalidRequest(f"{path}: {what}" if path else what, param=path or None) from None
