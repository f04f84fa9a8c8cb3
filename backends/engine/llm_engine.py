"""The synchronous engine: ``step()`` is schedule -> run -> postprocess.

The scheduler picks the step's tokens and books its results (``Scheduler.postprocess``); the model
runner computes the step's logits over the KV cache ``kv_sizing`` planned; the engine in between owns the
requests: it tokenizes them, samples, and turns their sequences into ``RequestOutput``s.
"""

from __future__ import annotations

import itertools
import logging
import random
import time
from dataclasses import dataclass

import torch

from backends.engine.config import MAX_DEFAULT_MODEL_LEN, EngineConfig
from backends.engine.cpu_allocator import keep_freed_memory
from backends.engine.cuda_graphs import GraphCapturer, graph_config
from backends.engine.detokenizer import IncrementalDetokenizer
from backends.engine.errors import EngineDeadError, PromptTooLong
from backends.engine.kv_events.publisher import build_publisher
from backends.engine.kv_groups import KVBlocks, build_kv_blocks
from backends.engine.kv_sizing import plan_kv_cache
from backends.engine.loader import LoadedModel, ModelLoader, load_model
from backends.engine.model_runner import ModelRunner
from backends.engine.models import instantiate
from backends.engine.outputs import CompletionOutput, RequestMetrics, RequestOutput
from backends.engine.parallel.workers import WorkerPool
from backends.engine.rank import layout_of, start_ranks, start_runners
from backends.engine.sampler import Sampler, SampleResult
from backends.engine.sampling_params import SamplingParams
from backends.engine.scheduler import Scheduler, SchedulerOutput
from backends.engine.sequence import Sequence, SequenceStatus
from backends.engine.spec_decode import SpecDecodeStats, build_proposer, verify
from backends.engine.stats import EngineStats
from backends.engine.structured_output.compiler import GrammarCompiler, GrammarCompilerConfig
from backends.engine.structured_output.matcher import SequenceGrammar
from backends.engine.tokenizer import Tokenizer
from backends.openmp import default_num_threads

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

__all__ = ["EngineStats", "LLMEngine"]


@dataclass
class _Request:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    seqs: list[Sequence]
    first_scheduled_s: float | None = None


class LLMEngine:
    """Loads one model and serves many requests with continuous batching over a paged KV cache."""

    def __init__(
        self,
        config: EngineConfig,
        *,
        loader: ModelLoader | None = None,
        graph_capturer: GraphCapturer | None = None,
        grammar_config: GrammarCompilerConfig | None = None,
    ) -> None:
        """``graph_capturer``: captures the decode graphs (default CUDA's on CUDA, none elsewhere;
        tests pass ``cuda_graphs.EagerGraphCapturer`` to run the graph path on the CPU).
        ``grammar_config``: how structured-output constraints compile (the defaults unless given)."""
        self.config = config
        self.device = torch.device(_resolve_device(config.device))
        if self.device.type == "cpu":
            # the ranks of a parallel engine share the cores
            torch.set_num_threads(config.num_threads or max(1, default_num_threads() // config.world_size))
            keep_freed_memory()
        # what the device held before this engine: its own bytes are what they grow by
        is_cuda = self.device.type == "cuda"
        baseline_bytes = torch.cuda.memory_allocated(self.device) if is_cuda else 0
        started = time.monotonic()
        log.info("loading model %s", config.model)
        loaded: LoadedModel = (loader or load_model)(config.model)
        self.tokenizer: Tokenizer = loaded.tokenizer
        self.model_name: str = loaded.served_name
        self.model_config = cfg = loaded.model_config
        self.max_model_len: int = config.max_model_len or min(
            cfg.max_position_embeddings, MAX_DEFAULT_MODEL_LEN
        )
        cfg.check_servable(self.max_model_len)  # before the weights: refuse fast, never serve wrong output
        dtype = DTYPES[config.dtype]
        max_position = max(self.max_model_len, cfg.max_position_embeddings)
        layout_of(config).check(cfg)  # a split the heads or layers do not allow: refused before any process
        self.workers: WorkerPool | None = None
        """Ranks 1..N-1 of a tensor/pipeline-parallel engine (``rank.py``); None: this process alone."""
        if config.world_size > 1:  # the workers load their shards while this process loads rank 0's
            self.workers, model = start_ranks(
                config,
                loader or load_model,
                loaded,
                device=self.device,
                dtype=dtype,
                max_position=max_position,
                num_threads=torch.get_num_threads(),
            )
        else:
            # packed for prefill-sized batches: bf16's 2,048-row GEMMs run 1.2x faster so, and decode-sized
            # ones (up to max_num_seqs rows) at the same speed either way (docs/engine.md, CPU kernels)
            model = instantiate(
                loaded,
                dtype=dtype,
                device=self.device,
                max_position=max_position,
                batch_hint=config.max_num_batched_tokens,
            )
        plan = plan_kv_cache(
            cfg, config, self.device, dtype, self.max_model_len, baseline_allocated_bytes=baseline_bytes
        )
        if self.workers is not None:  # each worker allocates its KV cache shard from this plan
            start_runners(self.workers, plan)
        log.info(
            "model %s loaded in %.1f s: KV blocks of %d tokens: %s",
            self.model_name,
            time.monotonic() - started,
            config.block_size,
            plan.sizes,
        )
        self.block_manager: KVBlocks = build_kv_blocks(
            plan.sizes,
            config.block_size,
            enable_prefix_caching=config.enable_prefix_caching,
            window=plan.window or 0,
            single_pool_window=plan.single_pool_window,
        )
        self.proposer = build_proposer(config, self.device, dtype, cfg.vocab_size, self.max_model_len)
        self.spec_stats = SpecDecodeStats()
        self.scheduler = Scheduler(
            self.block_manager,
            max_num_seqs=config.max_num_seqs,
            max_num_batched_tokens=config.max_num_batched_tokens,
            eos_token_id=self.tokenizer.eos_token_id,
            max_model_len=self.max_model_len,
            token_text=self.tokenizer.token_text,
            proposer=self.proposer,
            speculative_max_batch=config.speculative_max_batch,
            background=config.background_on(self.device.type),
            long_prefill_token_threshold=config.long_prefill_token_threshold,
        )
        self.runner = ModelRunner(
            model,
            num_blocks=plan.sizes.num_blocks,
            num_sliding_blocks=plan.sizes.num_sliding_blocks,
            block_size=config.block_size,
            sliding_window=plan.window,
            quantization=config.quantization,
            kv_cache_dtype=config.kv_cache_dtype,
            workers=self.workers,
            cuda_graphs=graph_config(  # never with workers: a graph would capture one step's collectives
                enforce_eager=config.enforce_eager or self.workers is not None,
                device=self.device,
                max_num_seqs=config.max_num_seqs,
                max_model_len=self.max_model_len,
                capturer=graph_capturer,
            ),
        )
        self.sampler = Sampler()
        self.requests: dict[str, _Request] = {}
        self._rng = random.Random(config.seed)
        self._seq_ids = itertools.count()
        self._arrivals = itertools.count()
        self.num_prompt_tokens = 0
        self.grammar_compiler = GrammarCompiler(self.tokenizer, cfg.vocab_size, grammar_config)
        """Structured outputs' constraints, compiled once each (thread-safe: a server compiles off its
        event loop, and ``add_request`` finds them cached)."""
        self.kv_events = build_publisher(config.kv_events, self.block_manager)  # last: binds only on success

    @property
    def num_generated_tokens(self) -> int:
        """Tokens sampled since start-up (the scheduler appends them)."""
        return self.scheduler.num_generated_tokens

    # -- requests ------------------------------------------------------------------------------------
    def tokenize_prompt(self, prompt: str | list[int], params: SamplingParams) -> list[int]:
        """Validate a request without touching engine state (safe from any thread)."""
        params.validate()
        if isinstance(prompt, str):
            ids = self.tokenizer.encode(prompt, add_special_tokens=True)
        else:
            ids = list(prompt)
            vocab = self.model_config.vocab_size
            if not all(isinstance(t, int) and 0 <= t < vocab for t in ids):
                raise ValueError(f"prompt token ids must be integers in [0, {vocab})")
        if not ids:
            raise ValueError("prompt is empty")
        if len(ids) >= self.max_model_len:
            raise PromptTooLong(
                f"prompt has {len(ids)} tokens; this model's maximum context is {self.max_model_len} "
                "tokens including at least one generated token"
            )
        capacity = self.block_manager.num_token_slots
        if len(ids) + 1 > capacity:
            raise PromptTooLong(f"prompt has {len(ids)} tokens but the whole KV cache holds {capacity}")
        return ids

    def add_request(
        self,
        request_id: str,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        cache_salt: str | None = None,
        priority: int = 0,
    ) -> None:
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already running")
        ids = self.tokenize_prompt(prompt, params)
        # structured outputs: compiled (or found in the cache) before the request holds any state
        grammar = self.grammar_compiler.compile(params.structured) if params.structured is not None else None
        arrival = next(self._arrivals)
        seqs = [
            Sequence(
                seq_id=next(self._seq_ids),
                request_id=request_id,
                token_ids=list(ids),
                params=params,
                arrival=arrival,
                index=i,
                priority=priority,
                cache_salt=cache_salt,
            )
            for i in range(params.n)
        ]
        for seq in seqs:
            seq.detokenizer = IncrementalDetokenizer(self.tokenizer, len(ids))
            seq.logprobs = [] if params.logprobs is not None else None
            seq.grammar = SequenceGrammar(grammar) if grammar is not None else None  # one per completion
            if not params.is_greedy:
                seed = self._rng.getrandbits(62) if params.seed is None else params.seed + seq.index
                seq.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.requests[request_id] = _Request(request_id, ids, params, seqs)
        self.num_prompt_tokens += len(ids)
        self.scheduler.add(seqs[0], forks=seqs[1:])  # the other n-1 fork from it once its prompt is computed

    def abort_request(self, request_id: str) -> None:
        req = self.requests.pop(request_id, None)
        if req is None:
            return
        for seq in req.seqs:
            self._finish(seq, "abort")

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    # -- the step ------------------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        sched = self.scheduler.schedule()
        self._mark_scheduled(sched)
        touched = {seq.request_id for seq in sched.finished}
        if sched.scheduled:
            try:
                result = self._run(sched)
                sampled = self.scheduler.postprocess(sched.scheduled, result)
                touched |= {seq.request_id for seq in sampled}
            except Exception as exc:  # a failed forward fails its batch, never the engine...
                log.exception("engine step failed")
                for item in sched.scheduled:
                    item.seq.error = f"{type(exc).__name__}: {exc}"
                    self._finish(item.seq, "error")
                    touched.add(item.seq.request_id)
                if isinstance(exc, EngineDeadError):  # ...unless a rank of a parallel engine is lost
                    raise
        self.kv_events.flush()  # this step's prefix-cache events, one batch
        return [self._output(rid) for rid in touched if rid in self.requests]

    def _mark_scheduled(self, sched: SchedulerOutput) -> None:
        scheduled_s = time.perf_counter()  # after the pick: never before a request was submitted
        for item in sched.scheduled:
            req = self.requests.get(item.seq.request_id)
            if req is not None and req.first_scheduled_s is None:
                req.first_scheduled_s = scheduled_s  # its queue wait ends here

    def _run(self, sched: SchedulerOutput) -> SampleResult | None:
        """The step's forward pass, and the tokens of each sequence whose last chunk it computed: one
        sampled, or a speculative item's kept proposals and the token after them."""
        logits = self.runner.run(sched.scheduled)
        items = [item for item in sched.scheduled if item.is_last_chunk]
        if not items:
            return None
        if not any(item.spec_token_ids for item in items):
            return self.sampler(logits, [item.seq for item in items])
        starts = list(itertools.accumulate((item.num_sample_rows for item in items), initial=0))
        plain = [j for j, item in enumerate(items) if not item.spec_token_ids]
        result = SampleResult([[] for _ in items], [None] * len(items))
        if plain:
            rows = torch.tensor([starts[j] for j in plain], device=logits.device)
            sampled = self.sampler(logits.index_select(0, rows), [items[j].seq for j in plain])
            for j, tokens, lp in zip(plain, sampled.token_ids, sampled.logprobs, strict=True):
                result.token_ids[j], result.logprobs[j] = tokens, lp
        for j, item in enumerate(items):
            if item.spec_token_ids:
                draft = item.spec_token_ids
                probs = self.proposer.proposal_probs(item.seq) if self.proposer is not None else None
                tokens = verify(logits[starts[j] : starts[j + 1]], draft, item.seq, probs)
                self.spec_stats.observe(len(draft), len(tokens) - 1)
                result.token_ids[j] = tokens
        return result

    def _finish(self, seq: Sequence, reason: str) -> None:
        if seq.is_finished:
            return
        if seq in self.scheduler.running or seq in self.scheduler.waiting:
            self.scheduler.finish(seq, reason)
        else:  # an n > 1 child that never forked
            seq.status = SequenceStatus.FINISHED
            seq.finish_reason = reason

    def _output(self, request_id: str) -> RequestOutput:
        req = self.requests[request_id]
        outputs = [
            CompletionOutput(
                index=s.index,
                text=s.text,
                token_ids=s.output_token_ids,
                finish_reason=s.finish_reason,
                logprobs=list(s.logprobs) if s.logprobs is not None else None,
                error=s.error,
                stop_reason=s.stop_reason,
            )
            for s in req.seqs
        ]
        finished = all(s.is_finished for s in req.seqs)
        if finished:
            del self.requests[request_id]
        return RequestOutput(
            request_id,
            req.prompt_token_ids,
            outputs,
            finished,
            num_cached_tokens=req.seqs[0].num_cached_tokens,
            metrics=RequestMetrics(first_scheduled_s=req.first_scheduled_s),
        )

    # -- batch API and stats -------------------------------------------------------------------------
    def generate(
        self, prompts: list[str] | list[list[int]], params: SamplingParams | list[SamplingParams]
    ) -> list[RequestOutput]:
        """Run prompts to completion; outputs in prompt order."""
        all_params = params if isinstance(params, list) else [params] * len(prompts)
        ids = [f"generate-{next(self._arrivals)}-{i}" for i in range(len(prompts))]
        prompt_list: list[str | list[int]] = list(prompts)
        for rid, prompt, p in zip(ids, prompt_list, all_params, strict=True):
            self.add_request(rid, prompt, p)
        done: dict[str, RequestOutput] = {}
        while len(done) < len(ids):
            for out in self.step():
                if out.finished:
                    done[out.request_id] = out
        return [done[rid] for rid in ids]

    def stats(self) -> EngineStats:
        bm = self.block_manager
        is_cuda = self.device.type == "cuda"
        return EngineStats(
            num_running=len(self.scheduler.running),
            num_waiting=len(self.scheduler.waiting),
            kv_cache_usage=bm.usage,
            num_blocks_total=bm.num_blocks,
            num_blocks_free=bm.num_free_blocks,
            prefix_cache_queries=bm.prefix_cache_queries,
            prefix_cache_hits=bm.prefix_cache_hits,
            num_preemptions=self.scheduler.num_preemptions,
            num_generated_tokens=self.num_generated_tokens,
            num_prompt_tokens=self.num_prompt_tokens,
            spec_num_drafts=self.spec_stats.num_drafts,
            spec_num_draft_tokens=self.spec_stats.num_draft_tokens,
            spec_num_accepted_tokens=self.spec_stats.num_accepted_tokens,
            spec_accepted_per_pos=tuple(self.spec_stats.accepted_per_pos),
            is_cuda=is_cuda,
            gpu_memory_allocated_bytes=torch.cuda.memory_allocated(self.device) if is_cuda else 0,
            gpu_memory_reserved_bytes=torch.cuda.memory_reserved(self.device) if is_cuda else 0,
        )

    def close(self) -> None:
        """Stop the KV-event publisher and the worker ranks of a parallel engine (idempotent). The
        workers are daemons: they also end with this process."""
        self.kv_events.close()
        if self.workers is not None:
            self.workers.close()

    def check_invariants(self) -> None:
        """Block-pool consistency against every live sequence (tests call this after each step)."""
        self.block_manager.check_invariants(self.scheduler.live_seqs)


def _resolve_device(device: str) -> str:
    return ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
