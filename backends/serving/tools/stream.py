"""One streamed choice's text as OpenAI deltas: content, and each ``<tool_call>`` as tool-call deltas.

Text is fed as it arrives; ``feed`` answers the deltas it may send now and keeps back what is still
undecided (a piece that may be the start of ``<tool_call>``, whitespace that may precede a call, the
``}`` that may close the call rather than its arguments). A call whose text begins the usual way,
``{"name": "NAME", "arguments": {``, is announced as soon as its name is read (a first delta with
index, id, type, name and ``arguments: ""``) and its arguments follow piece by piece as the model writes
them.
A call written any other way is held until ``</tool_call>`` and sent whole; if it does not parse it is
sent as content. Nothing of the markup reaches the content of a well-formed call. Calls past
``max_calls`` are dropped, as the parser drops them.

Content is trimmed of surrounding whitespace, as ``parser.parse_tool_calls`` trims it, so a stream and
a plain reply of the same text agree.
"""

from __future__ import annotations

import json

from backends.serving.protocol import ChatDelta, FunctionDelta, ToolCallDelta
from backends.serving.tools.markup import (
    CALL_HEADER,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    arguments_so_far,
    held_prefix_length,
    without_closing_brace,
)
from backends.serving.tools.parser import new_call_id, parse_call_body


class ToolCallStream:
    """The incremental tool-call reader of one streamed choice."""

    def __init__(self, max_calls: int | None = None) -> None:
        self.max_calls = max_calls
        """Calls after this many are dropped (``parallel_tool_calls: false`` is 1); None: no limit."""
        self.num_calls = 0
        """Calls announced so far (the finish reason is ``tool_calls`` when any)."""
        self._is_dropping = False
        self._buffer = ""
        self._pending_space = ""
        self._has_content = False
        self._is_in_call = False
        self._is_streaming_arguments = False

    def feed(self, text: str) -> list[ChatDelta]:
        """The deltas that ``text`` (the next piece of the reply) lets the stream send."""
        self._buffer += text
        out: list[ChatDelta] = []
        while self._step(out):
            pass
        return out

    def finish(self) -> list[ChatDelta]:
        """The deltas of whatever is still held, once the reply has ended."""
        out: list[ChatDelta] = []
        rest, self._buffer = self._buffer, ""
        if not self._is_in_call:
            self._content(rest, out)
        elif self._is_streaming_arguments:  # cut inside the call: what it held may be a begun close tag
            self._arguments(arguments_so_far(rest), out)
        else:  # a call left open: sent if it parses, else it was text
            self._whole_call(rest, TOOL_CALL_OPEN + rest, out)
        self._is_in_call = self._is_streaming_arguments = self._is_dropping = False
        return out

    def _step(self, out: list[ChatDelta]) -> bool:
        """Consume what can be decided; True when another step may decide more."""
        buffer = self._buffer
        if not self._is_in_call:
            start = buffer.find(TOOL_CALL_OPEN)
            if start < 0:  # text; the end may be the start of a tag
                end = len(buffer) - held_prefix_length(buffer, TOOL_CALL_OPEN)
                self._content(buffer[:end], out)
                self._buffer = buffer[end:]
                return False
            self._content(buffer[:start], out)
            self._buffer = buffer[start + len(TOOL_CALL_OPEN) :]
            self._is_in_call = True
            return True
        close = buffer.find(TOOL_CALL_CLOSE)
        if self._is_streaming_arguments:
            if close < 0:
                end = _safe_arguments_end(buffer)
                self._arguments(buffer[:end], out)
                self._buffer = buffer[end:]
                return False
            self._arguments(without_closing_brace(buffer[:close]), out)
            self._end_call(close)
            return True
        header = CALL_HEADER.match(buffer)
        # the usual form, arguments an object: announce the call, then stream its arguments
        if header is not None and buffer[header.end() : header.end() + 1] == "{":
            try:
                name = json.loads(f'"{header.group(1)}"')
            except ValueError:
                name = None
            if isinstance(name, str) and name:
                self._is_dropping = self._is_full()
                if not self._is_dropping:
                    out.append(self._start_delta(name, ""))
                self._buffer = buffer[header.end() :]
                self._is_streaming_arguments = True
                return True
        if close < 0:
            return False  # another form: wait for the whole call
        body = buffer[:close]
        self._whole_call(body, TOOL_CALL_OPEN + body + TOOL_CALL_CLOSE, out)
        self._end_call(close)
        return True

    def _end_call(self, close: int) -> None:
        self._buffer = self._buffer[close + len(TOOL_CALL_CLOSE) :]
        self._is_in_call = self._is_streaming_arguments = self._is_dropping = False

    def _is_full(self) -> bool:
        return self.max_calls is not None and self.num_calls >= self.max_calls

    def _whole_call(self, body: str, as_text: str, out: list[ChatDelta]) -> None:
        call = parse_call_body(body)
        if call is None:
            self._content(as_text, out)
        elif not self._is_full():
            out.append(self._start_delta(call.name, call.arguments))

    def _start_delta(self, name: str, arguments: str) -> ChatDelta:
        index, self.num_calls = self.num_calls, self.num_calls + 1
        function = FunctionDelta(name=name, arguments=arguments)
        return ChatDelta(
            tool_calls=[ToolCallDelta(index=index, id=new_call_id(), type="function", function=function)]
        )

    def _arguments(self, piece: str, out: list[ChatDelta]) -> None:
        if piece and not self._is_dropping:
            delta = ToolCallDelta(index=self.num_calls - 1, function=FunctionDelta(arguments=piece))
            out.append(ChatDelta(tool_calls=[delta]))

    def _content(self, text: str, out: list[ChatDelta]) -> None:
        """Send text, holding trailing whitespace until more text follows (and dropping leading)."""
        if not text:
            return
        text = self._pending_space + text
        if not self._has_content:
            text = text.lstrip()
        kept = text.rstrip()
        self._pending_space = text[len(kept) :]
        if kept:
            out.append(ChatDelta(content=kept))
            self._has_content = True


def _safe_arguments_end(buffer: str) -> int:
    """How much of a call's unfinished argument text may be sent: all but what may close the call."""
    return len(arguments_so_far(buffer))
