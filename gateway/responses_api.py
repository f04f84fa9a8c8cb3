"""The Responses API (``POST /v1/responses``) on the wire: its prompt, its usage and its streams.

A Responses stream is server-sent events, each an ``event:`` line and a typed JSON ``data:`` line
(``response.created``, ``response.output_text.delta``, ..., ``response.completed``). There is no
``[DONE]``: the stream ends after ``response.completed`` (or ``response.failed`` /
``response.incomplete``), whose ``response.usage`` holds ``input_tokens`` and ``output_tokens``.
``ResponsesRelay`` passes every event on as bytes as soon as it is complete (the served model's name
rewritten to the one asked for), takes the usage from the last one, and counts the output's
``*.delta`` events (the output-token estimate when a stream is cut). A failure of the gateway's own
after the stream started is an ``error`` event in the API's shape. ``ResponseObject`` and
``RESPONSES_EVENT`` describe the answers in the gateway's OpenAPI document.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from gateway.errors import GatewayError, UpstreamProtocolError
from gateway.pipeline import Usage
from gateway.sse import DONE_EVENT, SSERelay, rewrite

__all__ = ["RESPONSES_EVENT", "ResponseObject", "ResponsesRelay", "as_messages", "read_response_usage"]


class ResponseObject(msgspec.Struct):
    """A response of the Responses API as the upstream answered it (other fields pass through)."""

    id: str
    object: str
    created_at: float
    model: str
    output: list[dict[str, Any]]


RESPONSES_EVENT = {
    "description": "One server-sent event of the Responses API: its type, then its JSON; the stream ends "
    "after `response.completed` (or `response.failed`, `response.incomplete`).",
    "type": "object",
    "required": ["event", "data"],
    "properties": {
        "event": {"type": "string", "description": "`response.created`, `response.output_text.delta`, ..."},
        "data": {"type": "string", "description": "The event as JSON, its `type` the same as `event`."},
    },
}
"""One event of a Responses stream, for the OpenAPI document."""


class _UsageProbe(msgspec.Struct):
    input_tokens: int = 0
    output_tokens: int = 0


class _Incomplete(msgspec.Struct):
    reason: str | None = None


class _ResponseProbe(msgspec.Struct):
    status: str | None = None
    usage: _UsageProbe | None = None
    incomplete_details: _Incomplete | None = None


class _EventProbe(msgspec.Struct):
    type: str = ""
    sequence_number: int | None = None
    response: _ResponseProbe | None = None


_response_decoder = msgspec.json.Decoder(_ResponseProbe)
_event_decoder = msgspec.json.Decoder(_EventProbe)
_FIELDS = (b"event:", b"id:", b"retry:", b":")
_LAST_EVENTS = frozenset({"response.completed", "response.failed", "response.incomplete"})


def as_messages(body: Mapping[str, Any]) -> list[Any]:
    """A Responses request's ``instructions`` and ``input`` as chat messages (the system message, then a
    user message or the input items as they are), for token counts and the tier classifier."""
    messages: list[Any] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    given = body.get("input")
    if isinstance(given, str):
        messages.append({"role": "user", "content": given})
    elif isinstance(given, list):
        messages.extend(given)
    return messages


def _outcome(probe: _ResponseProbe) -> tuple[Usage | None, list[str]]:
    usage = Usage(probe.usage.input_tokens, probe.usage.output_tokens) if probe.usage is not None else None
    reason = (probe.incomplete_details.reason if probe.incomplete_details else None) or probe.status
    return usage, [reason] if reason else []


def read_response_usage(body: bytes) -> tuple[Usage | None, list[str]]:
    """Usage and outcome (``completed``, or why it is incomplete) of a complete Responses answer."""
    try:
        probe = _response_decoder.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise UpstreamProtocolError("upstream returned a body that is not a JSON response") from None
    return _outcome(probe)


class ResponsesRelay(SSERelay):
    """``SSERelay`` for the Responses API's typed events (no usage chunk to drop, no ``[DONE]``)."""

    end_of_stream = b""

    def __init__(self, replacements: tuple[tuple[bytes, bytes], ...]) -> None:
        super().__init__(replacements, drop_usage_chunk=False)
        self.sequence_number = -1
        """The last event's ``sequence_number``: the gateway's own error event takes the next."""

    def _event(self, event: bytes) -> bytes | None:
        if not event:
            return None
        data = []
        for line in event.split(b"\n"):
            if line.startswith(b"data:"):
                data.append(line[5:].strip())
            elif not line.startswith(_FIELDS):
                raise UpstreamProtocolError("upstream sent a malformed server-sent event")
        if not data:
            return event + b"\n\n"  # comments and keep-alives pass through
        payload = b"\n".join(data)
        if payload == b"[DONE]":  # not the API's, but an OpenAI-compatible server may end with it
            self.is_done = self.is_complete = True
            return DONE_EVENT
        try:
            probe = _event_decoder.decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise UpstreamProtocolError("upstream sent an event that is not JSON") from None
        if probe.sequence_number is not None:
            self.sequence_number = probe.sequence_number
        if probe.type.endswith(".delta"):
            self.num_events += 1  # a piece of the output: about a token
        elif probe.type == "error":
            self.error = payload
        if probe.response is not None:
            usage, reasons = _outcome(probe.response)
            if usage is not None:
                self.usage = usage
            if probe.type in _LAST_EVENTS:
                self.finish_reasons = reasons
                self.is_complete = True  # the stream may still end with [DONE]: read on to its end
        return rewrite(event, self.replacements) + b"\n\n"

    def error_event(self, error: GatewayError) -> bytes:
        """The gateway's own error as the API's ``error`` event (``code``, ``message``, ``param``)."""
        self.sequence_number += 1
        body = {
            "type": "error",
            "code": error.code,
            "message": error.message,
            "param": error.param,
            "sequence_number": self.sequence_number,
        }
        return b"event: error\ndata: " + msgspec.json.encode(body) + b"\n\n"
