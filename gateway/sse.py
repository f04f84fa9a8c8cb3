"""Relaying an upstream's server-sent events to the client as bytes.

Each complete event is passed on as soon as it has arrived, with byte-level edits and no
re-serialisation: the served model name becomes the name the client asked for, and the usage-only
chunk the gateway asked for (``upstream_stream_options``) is dropped when the client did not ask for
it. vLLM moves ``system_fingerprint`` onto that usage chunk when usage is on, so while the gateway
drops it, a chunk that finishes a choice without a fingerprint waits for the next event (the usage
chunk follows it at once) and gets the usage chunk's fingerprint: the client sees the fingerprint
where the backend would have put it without usage. Every ``data:`` payload is checked to be JSON
(msgspec skims it into a tiny struct), which is also how usage and finish reasons are read for
accounting. The Responses API's typed events are relayed by ``gateway.responses_api.ResponsesRelay``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.errors import GatewayError, UpstreamProtocolError
from gateway.pipeline import Usage


class _Usage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _Choice(msgspec.Struct):
    finish_reason: str | None = None


class _ChunkProbe(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: msgspec.Raw = msgspec.Raw()
    """The event's ``error`` as it came (any JSON value; msgspec cannot take ``Raw | None``); empty when
    absent."""
    system_fingerprint: str | None = None


class _BodyProbe(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None


_chunk_decoder = msgspec.json.Decoder(_ChunkProbe)
_body_decoder = msgspec.json.Decoder(_BodyProbe)
_ALLOWED_FIELDS = (b"event:", b"id:", b"retry:", b":")
DONE_EVENT = b"data: [DONE]\n\n"


def model_rewriter(served: str, asked: str) -> tuple[tuple[bytes, bytes], ...]:
    """The byte replacements that make responses name the model the client asked for."""
    if served == asked:
        return ()
    enc = msgspec.json.encode
    s, a = enc(served), enc(asked)
    return ((b'"model":' + s, b'"model":' + a), (b'"model": ' + s, b'"model": ' + a))


def upstream_stream_options(options: Any, *, include_usage: bool) -> dict[str, Any]:
    """The ``stream_options`` the gateway sends: ``include_usage`` on (it accounts tokens from the usage
    chunk). vLLM's ``continuous_usage_stats`` puts usage on every chunk only with ``include_usage``, so
    it is kept only when the client asked for usage itself, as the backend would have honoured it."""
    sent = dict(options) if isinstance(options, dict) else {}
    if not include_usage:
        sent.pop("continuous_usage_stats", None)
    sent["include_usage"] = True
    return sent


def with_fingerprint(event: bytes, fingerprint: str) -> bytes:
    """A chunk event (``data: {...}``) with ``system_fingerprint`` set (it had none, or null)."""
    value = msgspec.json.encode(fingerprint)
    for null in (b'"system_fingerprint":null', b'"system_fingerprint": null'):
        if null in event:
            return event.replace(null, b'"system_fingerprint":' + value, 1)
    start = event.index(b"{") + 1
    separator = b"" if event[start:].lstrip().startswith(b"}") else b","
    return event[:start] + b'"system_fingerprint":' + value + separator + event[start:]


def rewrite(data: bytes, replacements: tuple[tuple[bytes, bytes], ...]) -> bytes:
    for old, new in replacements:
        data = data.replace(old, new, 1)
    return data


def read_body_usage(body: bytes) -> tuple[Usage | None, list[str]]:
    """Usage and finish reasons of a complete JSON response; (None, []) if it has none."""
    try:
        probe = _body_decoder.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        raise UpstreamProtocolError("upstream returned a body that is not a JSON response") from None
    usage = Usage(probe.usage.prompt_tokens, probe.usage.completion_tokens) if probe.usage else None
    reasons = [c.finish_reason for c in probe.choices or () if c.finish_reason]
    return usage, reasons


class SSERelay:
    """Turns upstream byte chunks into client byte chunks, one call of ``feed`` per network read."""

    end_of_stream = DONE_EVENT
    """What ends the client's stream after the upstream's own error event."""

    def __init__(self, replacements: tuple[tuple[bytes, bytes], ...], *, drop_usage_chunk: bool) -> None:
        self.replacements = replacements
        self.drop_usage_chunk = drop_usage_chunk
        self.usage: Usage | None = None
        self.finish_reasons: list[str] = []
        self.is_done = False
        """``[DONE]`` came: nothing more is read."""
        self.is_complete = False
        """The answer's last event came: the upstream closing the stream now is its normal end."""
        self.error: bytes | None = None
        """An error event the upstream itself sent."""
        self.failure: UpstreamProtocolError | None = None
        """Set when the upstream broke the protocol; the events before it were still returned."""
        self.num_events = 0
        self._buffer = b""
        self._held: bytes | None = None
        """A chunk that finished a choice without a fingerprint, waiting for the usage chunk's."""

    def feed(self, chunk: bytes) -> bytes:
        """Complete events in ``chunk`` (plus what was buffered), ready to send; may be empty."""
        data = self._buffer + chunk if self._buffer else chunk
        if b"\r" in data:  # CRLF upstreams; a read may end between the \r and its \n, so on the whole
            data = data.replace(b"\r\n", b"\n")
        end = data.rfind(b"\n\n")
        if end < 0:
            self._buffer = data
            return b""
        self._buffer = data[end + 2 :]
        complete = data[: end + 2]
        if self.is_done or self.failure is not None:
            return b""
        out = []
        for event in complete.split(b"\n\n")[:-1]:
            try:
                kept = self._event(event)
            except UpstreamProtocolError as e:
                self.failure = e  # pass on what came before it; the caller ends the stream
                out.append(self.flush())
                break
            if kept is not None:
                out.append(kept)
                if self.is_done:
                    break
        return b"".join(out)

    def _event(self, event: bytes) -> bytes | None:
        if not event:
            return None
        if not event.startswith(b"data:"):
            if all(line.startswith(_ALLOWED_FIELDS) for line in event.split(b"\n")):
                return self.flush() + event + b"\n\n"  # comments and keep-alives pass through
            raise UpstreamProtocolError("upstream sent a malformed server-sent event")
        payload = event[5:].strip()
        if payload == b"[DONE]":
            self.is_done = self.is_complete = True
            return self.flush() + DONE_EVENT
        try:
            probe = _chunk_decoder.decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise UpstreamProtocolError("upstream sent an event that is not JSON") from None
        self.num_events += 1
        error = bytes(probe.error)
        if error and error != b"null":  # the upstream's own error event
            self.error = error
        is_finish = False
        if probe.choices:
            for choice in probe.choices:
                if choice.finish_reason:
                    self.finish_reasons.append(choice.finish_reason)
                    is_finish = True
        if probe.usage is not None:
            self.usage = Usage(probe.usage.prompt_tokens, probe.usage.completion_tokens)
            if self.drop_usage_chunk and not probe.choices:  # the usage chunk only the gateway asked for
                held = self.flush()
                if held and probe.system_fingerprint:
                    held = with_fingerprint(held, probe.system_fingerprint)
                return held or None
        held, out = self.flush(), rewrite(event, self.replacements) + b"\n\n"
        if is_finish and self.drop_usage_chunk and probe.system_fingerprint is None:
            self._held = out  # until the next event: the usage chunk may carry its fingerprint
            return held or None
        return held + out

    def flush(self) -> bytes:
        """The chunk held back for a fingerprint, if any (the stream ended or moved on without one)."""
        held, self._held = self._held, None
        return held or b""

    def closing(self) -> bytes:
        """The end of the client's stream after the upstream's own error event."""
        return self.flush() + self.end_of_stream

    def error_event(self, error: GatewayError) -> bytes:
        """The gateway's own error, as the stream's last event (OpenAI's error shape, then ``[DONE]``)."""
        return self.flush() + error.to_sse() + DONE_EVENT
