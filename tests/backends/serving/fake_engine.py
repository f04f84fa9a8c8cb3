"""An in-memory twin of ``AsyncLLMEngine`` with a byte tokenizer, for the HTTP contract tests.

Each request "generates" a scripted reply one UTF-8 byte per step, so multi-byte characters really
arrive split across steps (the text ends in U+FFFD until their last byte), and holds one KV "block" per
running sequence so tests can check that aborts free them. It stops on stop strings and stop token ids
as the engine does, naming the one that ended a choice in its ``stop_reason``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from backends.engine.errors import EngineStopped, PromptTooLong, QueueFullError
from backends.engine.outputs import CompletionOutput, Logprob, RequestOutput
from backends.engine.sampling_params import SamplingParams
from backends.engine.stats import EngineStats

REPLY = "Hello, wörld! 😀 done."
MODEL = "tiny-fake"
"""The name the contract tests serve the twin under."""
EOS_ID = 256


class FakeTokenizer:
    """One token per UTF-8 byte; 256 is EOS. ChatML template."""

    eos_token_id = EOS_ID
    bos_token_id = None
    vocab_size = 257
    chat_stop_token_ids = (255,)
    """Byte 255 never occurs in UTF-8 text: it stands for an end-of-turn token (Gemma's <end_of_turn>)."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(text.encode())

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode(errors="replace")

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        if messages[0]["role"] == "assistant":
            raise ValueError("Conversations must start with a user or system message")
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


@dataclass(frozen=True)
class FakeModelConfig:
    vocab_size: int = 257
    """The fake tokenizer's byte ids and EOS."""


@dataclass
class FakeCore:
    tokenizer: FakeTokenizer = field(default_factory=FakeTokenizer)
    model_name: str = "tiny-fake"
    max_model_len: int = 512
    model_config: FakeModelConfig = field(default_factory=FakeModelConfig)


class FakeAsyncEngine:
    """Same shape as AsyncLLMEngine; ``step_s`` paces the steps; ``hold()`` keeps requests waiting;
    ``stop()`` ends every open request with ``EngineStopped`` (held ones too), as the engine does."""

    def __init__(self, *, max_waiting: int = 8, step_s: float = 0.001, reply: str = REPLY) -> None:
        self.engine = FakeCore()
        self.max_waiting = max_waiting
        self.step_s = step_s
        self.kv_capacity_tokens = 1 << 30
        """Tokens the whole KV cache holds: a prompt past it is ``PromptTooLong``, as in the engine."""
        self.reply = reply.encode()
        self.num_blocks_total = 64
        self.running: set[str] = set()
        self.waiting: set[str] = set()
        self.aborted: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.num_prompt_tokens = 0
        self.num_generated_tokens = 0
        self.is_started = False
        self.is_stopped = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._gate: asyncio.Event | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._gate = asyncio.Event()
        self._gate.set()
        self.is_started = True
        self.is_stopped = False

    async def stop(self) -> None:
        self.is_started = False
        self.is_stopped = True
        if self._gate is not None:
            self._gate.set()  # the held requests wake up to fail

    def hold(self) -> None:
        """Keep new requests waiting (thread-safe)."""
        assert self._loop is not None and self._gate is not None
        self._loop.call_soon_threadsafe(self._gate.clear)

    def stop_from_thread(self) -> None:
        """``stop()`` on the server's loop, as its shutdown calls it, from a test's thread."""
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(self.stop(), self._loop).result(timeout=10)

    def release(self) -> None:
        assert self._loop is not None and self._gate is not None
        self._loop.call_soon_threadsafe(self._gate.set)

    def stats(self) -> EngineStats:
        used = len(self.running)
        return EngineStats(
            num_running=len(self.running),
            num_waiting=len(self.waiting),
            kv_cache_usage=used / self.num_blocks_total,
            num_blocks_total=self.num_blocks_total,
            num_blocks_free=self.num_blocks_total - used,
            prefix_cache_queries=self.num_prompt_tokens,
            prefix_cache_hits=0,
            num_preemptions=0,
            num_generated_tokens=self.num_generated_tokens,
            num_prompt_tokens=self.num_prompt_tokens,
        )

    def generate(
        self,
        request_id: str,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        cache_salt: str | None = None,
        priority: int = 0,
    ) -> AsyncIterator[RequestOutput]:
        params.validate()
        if self.is_stopped:
            raise EngineStopped("engine stopped")
        if len(self.waiting) >= self.max_waiting:
            raise QueueFullError(f"{len(self.waiting)} requests already wait")
        ids = self.engine.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if len(ids) >= self.engine.max_model_len:
            raise ValueError("prompt too long")
        if len(ids) + 1 > self.kv_capacity_tokens:
            raise PromptTooLong(
                f"prompt has {len(ids)} tokens but the whole KV cache holds {self.kv_capacity_tokens}"
            )
        self.calls.append({"request_id": request_id, "prompt": ids, "params": params,
                           "cache_salt": cache_salt, "priority": priority})  # fmt: skip
        self.waiting.add(request_id)
        return self._run(request_id, ids, params)

    async def _run(
        self, request_id: str, ids: list[int], params: SamplingParams
    ) -> AsyncIterator[RequestOutput]:
        assert self._gate is not None
        tokens: list[list[int]] = [[] for _ in range(params.n)]
        finish: list[str | None] = [None] * params.n
        stop_reasons: list[str | int | None] = [None] * params.n
        logprobs: list[list[tuple[Logprob, list[Logprob]]]] = [[] for _ in range(params.n)]
        limit = params.max_tokens or self.engine.max_model_len - len(ids)
        try:
            await self._gate.wait()
            self._check_stopped()
            self.waiting.discard(request_id)
            self.running.add(request_id)
            self.num_prompt_tokens += len(ids)
            while not all(finish):
                await asyncio.sleep(self.step_s)
                self._check_stopped()
                texts = []
                for i in range(params.n):
                    if finish[i] is None:
                        position = len(tokens[i])
                        token = self.reply[position] if position < len(self.reply) else EOS_ID
                        if token == EOS_ID and not params.ignore_eos:
                            finish[i] = "stop"
                        else:
                            tokens[i].append(token if token != EOS_ID else ord("."))
                            self.num_generated_tokens += 1
                            if params.logprobs is not None:
                                chosen = Logprob(token, -0.5, self.engine.tokenizer.decode([token]))
                                top = [
                                    Logprob(t, -1.0 - t / 1000, chr(t))
                                    for t in range(65, 65 + params.logprobs)
                                ]
                                logprobs[i].append((chosen, top))
                            if token in params.stop_token_ids:
                                finish[i], stop_reasons[i] = "stop", token
                            elif len(tokens[i]) >= limit:
                                finish[i] = "length"
                    text = self.engine.tokenizer.decode(tokens[i])
                    for stop in params.stop:
                        if stop in text:
                            text, finish[i], stop_reasons[i] = text[: text.index(stop)], "stop", stop
                    texts.append(text)
                yield RequestOutput(
                    request_id=request_id,
                    prompt_token_ids=ids,
                    outputs=[
                        CompletionOutput(
                            index=i,
                            text=texts[i],
                            token_ids=list(tokens[i]),
                            finish_reason=finish[i],
                            logprobs=list(logprobs[i]) if params.logprobs is not None else None,
                            stop_reason=stop_reasons[i],
                        )
                        for i in range(params.n)
                    ],
                    finished=all(finish),
                    num_cached_tokens=3,
                )
        finally:
            if not all(finish):
                self.aborted.append(request_id)
            self.waiting.discard(request_id)
            self.running.discard(request_id)

    def _check_stopped(self) -> None:
        if self.is_stopped:
            raise EngineStopped("engine stopped")


class FakeEmbedder:
    """An embedder twin: one fixed vector per text, a word count as its tokens."""

    model_name = "all-minilm-l6-v2"

    def embed(self, texts: list[str]) -> tuple[list[list[float]], int]:
        return [[1.0, 0.0, 0.0] for _ in texts], sum(len(t.split()) for t in texts)
