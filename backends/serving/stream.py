"""Server-sent events of a streamed completion: per-choice deltas, an optional usage chunk, [DONE].

Shared by chat and text completions; each passes the function that shapes one chunk. The engine's
outputs are cumulative, so a ``DeltaCursor`` per choice remembers what has been sent.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable

from backends.engine.outputs import CompletionOutput, RequestOutput
from backends.engine.sampling_params import SamplingParams
from backends.serving.errors import EngineFailed, ServingError
from backends.serving.generation import Generation
from backends.serving.protocol import PromptTokensDetails, Usage

log = logging.getLogger(__name__)

DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class DeltaCursor:
    """How much of one choice's cumulative text and tokens a stream has sent already."""

    __slots__ = ("is_finished", "is_started", "num_chars_sent", "num_logprob_chars", "num_tokens_sent")

    def __init__(self) -> None:
        self.num_chars_sent = 0
        self.num_tokens_sent = 0
        self.num_logprob_chars = 0
        """Characters of the tokens whose logprobs were sent (the next token's ``text_offset``)."""
        self.is_started = False
        self.is_finished = False

    def take_text(self, output: CompletionOutput, holdback_chars: int) -> str:
        """The new text to send; while running, hold back what a stop string or a split character may undo."""
        text = output.text
        end = len(text)
        if output.finish_reason is None:
            end -= holdback_chars
            # an incomplete UTF-8 sequence decodes to U+FFFD until its last byte arrives
            while end > self.num_chars_sent and text[end - 1] == "\ufffd":
                end -= 1
        if end <= self.num_chars_sent:
            return ""
        delta = text[self.num_chars_sent : end]
        self.num_chars_sent = end
        return delta

    def take_tokens(self, output: CompletionOutput) -> tuple[int, int]:
        """The range of token indexes not sent yet (for their logprobs); marks them sent."""
        start, self.num_tokens_sent = self.num_tokens_sent, len(output.token_ids)
        return start, self.num_tokens_sent


def stop_holdback_chars(params: SamplingParams) -> int:
    """Characters a stream keeps back so that a stop string, once matched, was never sent."""
    return max((len(s) for s in params.stop), default=1) - 1


def usage_of(output: RequestOutput) -> Usage:
    """OpenAI usage of a (finished) request, with the prefix-cache hits as ``cached_tokens``."""
    num_prompt = len(output.prompt_token_ids)
    num_completion = sum(len(c.token_ids) for c in output.outputs)
    return Usage(
        prompt_tokens=num_prompt,
        completion_tokens=num_completion,
        total_tokens=num_prompt + num_completion,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=output.num_cached_tokens),
    )


ChunkMaker = Callable[[CompletionOutput, str, DeltaCursor], bytes | list[bytes]]
"""(choice output, new text, its cursor) -> one encoded chunk, or several (none while a tool-call reader
holds the text back); it takes the cursor's tokens itself."""


async def sse_events(
    generation: Generation,
    make_chunk: ChunkMaker,
    make_usage_chunk: Callable[[Usage], bytes] | None,
) -> AsyncIterator[bytes]:
    """The SSE byte stream of an opened generation; closing it (or a disconnect) aborts the request."""
    params = generation.params
    holdback = stop_holdback_chars(params)
    cursors = [DeltaCursor() for _ in range(params.n)]
    last: RequestOutput | None = None
    try:
        async for output in generation:
            last = output
            for choice in output.outputs:
                cursor = cursors[choice.index]
                if cursor.is_finished:
                    continue
                if choice.finish_reason == "error":
                    raise EngineFailed(choice.error or "The engine failed on this request.")
                delta = cursor.take_text(choice, holdback)
                if not delta and choice.finish_reason is None:
                    continue  # nothing new that may be sent yet
                cursor.is_finished = choice.finish_reason is not None
                chunks = make_chunk(choice, delta, cursor)
                for chunk in [chunks] if isinstance(chunks, bytes) else chunks:
                    yield b"data: " + chunk + b"\n\n"
                    cursor.is_started = True
        if make_usage_chunk is not None and last is not None:
            yield b"data: " + make_usage_chunk(usage_of(last)) + b"\n\n"
    except ServingError as exc:
        log.warning("stream %s failed: %s", generation.request_id, exc.message)
        yield exc.to_sse()
    finally:
        await generation.aclose()
    yield DONE
