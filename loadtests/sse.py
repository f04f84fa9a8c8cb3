"""Measuring one streamed chat completion as its SSE lines arrive: TTFT, tokens/s, output tokens.

Pure (no Locust import), so unit tests can feed it lines and a clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(slots=True)
class StreamMeter:
    """Accumulates one stream's events; ``feed`` each line with the time it arrived."""

    started_s: float
    """When the request was sent (same clock as ``feed``'s ``now_s``)."""
    first_content_s: float | None = None
    """When the first chunk with non-empty content (or a tool-call delta) arrived."""
    last_content_s: float | None = None
    num_content_chunks: int = 0
    num_completion_tokens: int | None = None
    """From the usage chunk (``stream_options.include_usage``), when the server sent one."""
    error: str | None = None
    """The message of an error event, or why a line could not be parsed."""
    is_done: bool = False
    """``data: [DONE]`` arrived."""

    def feed(self, line: bytes | str, now_s: float) -> None:
        text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
        if not text.startswith("data:"):
            return  # blank separators, comments, `event:` / `id:` fields
        data = text[5:].strip()
        if data == "[DONE]":
            self.is_done = True
            return
        try:
            event = json.loads(data)
        except json.JSONDecodeError:
            self.error = self.error or f"an event that is not JSON: {data[:80]!r}"
            return
        if not isinstance(event, dict):
            self.error = self.error or "an event that is not a JSON object"
            return
        if "error" in event:
            error = event["error"]
            message = error.get("message") if isinstance(error, dict) else None
            self.error = self.error or f"error event: {message or error}"
            return
        usage = event.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.num_completion_tokens = usage["completion_tokens"]
        for choice in event.get("choices") or ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if isinstance(delta, dict) and (delta.get("content") or delta.get("tool_calls")):
                if self.first_content_s is None:
                    self.first_content_s = now_s
                self.last_content_s = now_s
                self.num_content_chunks += 1

    @property
    def ttft_ms(self) -> float | None:
        """Time to first token: request sent -> first content chunk."""
        if self.first_content_s is None:
            return None
        return (self.first_content_s - self.started_s) * 1000.0

    @property
    def tokens_per_s(self) -> float | None:
        """Decode speed: content chunks after the first / the time they took (one chunk ~ one token)."""
        if self.first_content_s is None or self.last_content_s is None or self.num_content_chunks < 2:
            return None
        elapsed_s = self.last_content_s - self.first_content_s
        if elapsed_s <= 0:
            return None
        return (self.num_content_chunks - 1) / elapsed_s

    @property
    def num_output_tokens(self) -> int:
        """The server's count when it sent usage, else the content chunks seen."""
        if self.num_completion_tokens is not None:
            return self.num_completion_tokens
        return self.num_content_chunks

    def problem(self) -> str | None:
        """Why this stream counts as failed, or None."""
        if self.error is not None:
            return self.error
        if not self.is_done:
            return "the stream ended without data: [DONE]"
        return None
