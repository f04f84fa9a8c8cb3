"""The reference engine's OpenAI-compatible server: ``python -m backends.server --model smollm2-135m``.

Several models in one process: ``--model smollm2-135m --model gemma3-270m``; ``--model NAME=SOURCE``
serves SOURCE under another name. Names whose SOURCE is the same share one engine (one copy of the
weights, one KV pool, one queue); each distinct engine gets an equal share of the KV budget and its own
scheduler, and their steps take turns on the CPU. The port opens at once; the weights load in a worker
thread (progress in the log) and ``/ready`` and ``/v1/models`` answer 503 until every model is in.

``--tensor-parallel-size N`` / ``--pipeline-parallel-size N`` split one model over N processes (this one
is rank 0 and serves the API); a rank that dies fails the requests in flight and stops the server with a
non-zero exit. At SIGTERM the requests in flight get ``--shutdown-timeout`` seconds (``EngineServer``).
See docs/engine.md.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import socket
import threading
from collections.abc import Sequence
from typing import Any

import uvicorn

from backends.engine.kv_events.config import KVEventsConfig
from backends.openmp import loaded_runtime, relaunch_with_intel_openmp
from backends.serving.app import ModelSpec, create_app
from backends.serving.engine_client import AsyncEngineLike
from backends.serving.state import EmbedderLike, ServingState

log = logging.getLogger("backends.server")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m backends.server", description=__doc__)
    parser.add_argument(
        "--model",
        action="append",
        default=None,
        metavar="[NAME=]SOURCE",
        help="smollm2-135m, gemma3-270m, a HF safetensors dir or a .gguf; repeat to serve several "
        "(default smollm2-135m); NAME=SOURCE serves it as NAME (same SOURCE: one copy of the weights)",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument(
        "--served-model-name",
        nargs="+",
        default=None,
        help="the names clients use for the one --model (default: --model); the first is its own",
    )
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--device", default="auto")
    parser.add_argument(
        "--quantization",
        default=None,
        choices=("int8", "int4"),
        help="int8: per-channel int8 weights for the decoder GEMMs; int4: grouped int4 weights "
        "(CPU and CUDA; LM head and embeddings stay float)",
    )
    parser.add_argument(
        "--kv-cache-dtype",
        default="auto",
        choices=("auto", "int8", "fp8"),
        help="KV-cache storage: auto (the model dtype), int8 (per token-head scales) or fp8 (e4m3)",
    )
    parser.add_argument(
        "--speculative-method",
        default=None,
        choices=("ngram", "draft"),
        help="speculative decoding: ngram (prompt lookup) or draft (--speculative-model proposes)",
    )
    parser.add_argument("--num-speculative-tokens", type=int, default=4)
    parser.add_argument("--speculative-model", default=None, help="the draft model's source")
    parser.add_argument(
        "--speculative-quantization",
        default=None,
        choices=("int8", "int4"),
        help="quantize the draft model's weights (a quantized copy of the target is a cheap draft)",
    )
    parser.add_argument("--ngram-prompt-lookup-max", type=int, default=4)
    parser.add_argument("--ngram-prompt-lookup-min", type=int, default=1)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument(
        "--long-prefill-token-threshold",
        type=int,
        default=0,
        help="most prompt tokens one request computes in a step, so a long prompt's prefill does not hold "
        "the decodes and short prompts beside it for its whole length; 0: no cap",
    )
    parser.add_argument(
        "--background-prefill-tokens",
        type=int,
        default=None,
        help="most prompt tokens a step computes for requests of worse priority classes than the best one "
        "running or waiting (batch lines beside interactive requests); default 16 on the CPU, no cap on "
        "CUDA; 0: no cap",
    )
    parser.add_argument(
        "--background-decode-seqs",
        type=int,
        default=None,
        help="most decodes of worse priority classes in a step a better class decodes in (batch lines "
        "beside interactive streams); default 2 on the CPU, no cap on CUDA; 0: no cap",
    )
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument(
        "--kv-cache-bytes", type=int, default=None, help="KV-cache budget in bytes, shared by the models"
    )
    parser.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.9,
        help="on CUDA: the share of the GPU's memory the engines may hold (weights, activations, KV cache), "
        "when --kv-cache-bytes is not given",
    )
    parser.add_argument(
        "--enforce-eager", action="store_true", help="no CUDA graphs: run every decode step eagerly"
    )
    parser.add_argument(
        "--tensor-parallel-size",
        "-tp",
        type=int,
        default=1,
        help="processes (one GPU each on CUDA) that split every layer: attention heads, MLP columns and "
        "the vocabulary",
    )
    parser.add_argument(
        "--pipeline-parallel-size",
        "-pp",
        type=int,
        default=1,
        help="stages (of --tensor-parallel-size processes each) that split the decoder layers",
    )
    parser.add_argument(
        "--pipeline-micro-batches",
        type=int,
        default=0,
        help="micro-batches each step is split into so pipeline stages overlap (0: automatic, 1: none)",
    )
    parser.add_argument("--no-prefix-caching", action="store_true")
    parser.add_argument(
        "--kv-events-config",
        type=_kv_events_config,
        default=None,
        metavar="JSON",
        help='publish KV-cache block events as vLLM does, e.g. \'{"enable_kv_cache_events": true, '
        '"publisher": "zmq", "endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558"}\'',
    )
    parser.add_argument(
        "--export-tokenizer",
        default=None,
        metavar="DIR",
        help="write the model's tokenizer.json and tokenizer_config.json (chat template, special tokens) "
        "to DIR once it is loaded, for a router that tokenizes prompts as the engine does",
    )
    parser.add_argument("--num-threads", type=int, default=None, help="torch threads on CPU")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-waiting", type=int, default=256, help="waiting-queue bound; beyond it 429")
    parser.add_argument(
        "--embedding-model",
        default="lazy",
        choices=("lazy", "minilm", "none"),
        help="all-minilm-l6-v2 for /v1/embeddings: loaded on first use (lazy), at start (minilm), or off",
    )
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    parser.add_argument("--access-log", action="store_true", help="log every request (off: it costs latency)")
    parser.add_argument(
        "--shutdown-timeout", type=float, default=5.0, help="seconds to finish the requests at SIGTERM"
    )
    args = parser.parse_args(argv)
    args.model = args.model or ["smollm2-135m"]
    if not 0.0 < args.gpu_memory_utilization <= 1.0:
        parser.error("--gpu-memory-utilization must be in (0, 1]")
    if args.served_model_name and len(args.model) > 1:
        parser.error("--served-model-name names the one --model; with several, use --model NAME=SOURCE")
    if args.tensor_parallel_size < 1 or args.pipeline_parallel_size < 1:
        parser.error("--tensor-parallel-size and --pipeline-parallel-size must be >= 1")
    if args.pipeline_micro_batches < 0:
        parser.error("--pipeline-micro-batches must be >= 0 (0: automatic)")
    try:
        args.models = served_models(args.model, args.served_model_name)
    except ValueError as exc:
        parser.error(str(exc))
    if (args.kv_events_config or args.export_tokenizer) and len(args.models) > 1:
        parser.error("--kv-events-config and --export-tokenizer serve one engine: give one --model source")
    if args.tensor_parallel_size * args.pipeline_parallel_size > 1 and len(args.models) > 1:
        parser.error("a tensor/pipeline-parallel engine owns its process's group: serve one --model source")
    return args


def served_models(values: Sequence[str], served_names: Sequence[str] | None = None) -> dict[str, list[str]]:
    """``--model`` values -> {source: [names]}: names whose source is the same share one engine."""
    models: dict[str, list[str]] = {}
    seen: set[str] = set()
    for value in values:
        name, sep, source = value.partition("=")
        if not sep:
            name = source = value
        if not name or not source:
            raise ValueError(f"--model {value!r}: expected SOURCE or NAME=SOURCE")
        names = list(served_names) if served_names else [name]
        for n in names:
            if n in seen:
                raise ValueError(f"the model name {n!r} is given twice")
            seen.add(n)
        models.setdefault(_source_key(source), []).extend(names)
    return models


def _kv_events_config(text: str) -> KVEventsConfig:
    try:
        return KVEventsConfig.from_json(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _source_key(source: str) -> str:
    """One key per set of weights: a path is compared by where it really is."""
    return os.path.realpath(source) if os.path.exists(source) else source


class RankWatch:
    """The parallel engines this server started: a lost rank stops ``server`` (uvicorn's graceful
    shutdown, so the requests in flight get their error first), after which ``main`` exits non-zero
    with ``lost``. ``close`` closes every engine (workers, KV-event publisher) at a normal shutdown."""

    def __init__(self) -> None:
        self.lost: str | None = None
        self.server: uvicorn.Server | None = None
        self._engines: list[Any] = []
        self._closing = False

    def adopt(self, engine: Any) -> None:
        """Watch ``engine`` (an ``LLMEngine``) when it has worker ranks; close it at shutdown."""
        self._engines.append(engine)
        if engine.workers is not None:
            engine.workers.on_lost(self._on_lost)

    def _on_lost(self, reason: str) -> None:
        if self._closing or self.lost is not None:
            return
        self.lost = reason
        if self.server is not None:
            self.server.should_exit = True

    def close(self) -> None:
        self._closing = True
        for engine in self._engines:
            engine.close()


def build_models(args: argparse.Namespace, watch: RankWatch | None = None) -> list[ModelSpec]:
    """One spec per distinct source, each building its engine (once per process) when the app starts;
    ``watch`` is told of parallel engines."""
    share = len(args.models)
    step_lock = threading.Lock() if share > 1 else None  # engines on one CPU take turns, not fight
    return [
        ModelSpec(
            tuple(names), factory=functools.partial(build_engine, args, source, share, step_lock, watch)
        )
        for source, names in args.models.items()
    ]


def build_engine(
    args: argparse.Namespace,
    source: str,
    share: int = 1,
    step_lock: threading.Lock | None = None,
    watch: RankWatch | None = None,
) -> AsyncEngineLike:
    """Load one model's weights and wrap its engine in the async front; ``share`` engines split the
    KV budget equally; ``watch`` watches its worker ranks when it has some."""
    from backends.engine.async_engine import AsyncLLMEngine
    from backends.engine.config import EngineConfig
    from backends.engine.llm_engine import LLMEngine

    defaults = EngineConfig(model=source)
    config = EngineConfig(
        model=source,
        dtype=args.dtype,
        device=args.device,
        quantization=args.quantization,
        kv_cache_dtype=args.kv_cache_dtype,
        speculative_method=args.speculative_method,
        num_speculative_tokens=args.num_speculative_tokens,
        speculative_model=args.speculative_model,
        speculative_quantization=args.speculative_quantization,
        ngram_prompt_lookup_max=args.ngram_prompt_lookup_max,
        ngram_prompt_lookup_min=args.ngram_prompt_lookup_min,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        long_prefill_token_threshold=args.long_prefill_token_threshold,
        background_prefill_tokens=args.background_prefill_tokens,
        background_decode_seqs=args.background_decode_seqs,
        max_model_len=args.max_model_len,
        kv_cache_bytes=None if args.kv_cache_bytes is None else args.kv_cache_bytes // share,
        kv_cache_fraction=defaults.kv_cache_fraction / share,
        gpu_memory_utilization=args.gpu_memory_utilization / share,
        enforce_eager=args.enforce_eager,
        enable_prefix_caching=not args.no_prefix_caching,
        num_threads=args.num_threads,
        seed=args.seed,
        tensor_parallel_size=args.tensor_parallel_size,
        pipeline_parallel_size=args.pipeline_parallel_size,
        pipeline_micro_batches=args.pipeline_micro_batches,
        kv_events=args.kv_events_config,
    )
    log.info("loading model %s (%s)", source, args.dtype)
    engine = LLMEngine(config)
    if watch is not None:
        watch.adopt(engine)
    if args.export_tokenizer:
        engine.tokenizer.save(args.export_tokenizer)
    log.info(
        "model %s loaded: max_model_len %d, OpenMP runtime %s",
        engine.model_name,
        engine.max_model_len,
        loaded_runtime(),
    )
    return AsyncLLMEngine(engine, max_waiting=args.max_waiting, step_lock=step_lock)


def build_embedder(args: argparse.Namespace) -> EmbedderLike | None:
    if args.embedding_model == "none":
        return None
    from backends.embedder import Embedder, find_model_dir

    try:
        return Embedder(find_model_dir(), num_threads=args.num_threads)
    except FileNotFoundError as exc:
        if args.embedding_model == "minilm":
            raise SystemExit(f"--embedding-model minilm: {exc}") from exc
        log.warning("no embedding model (%s); /v1/embeddings answers 404", exc)
        return None


class EngineServer(uvicorn.Server):
    """uvicorn's server, stopping the engines 1 s before its graceful-shutdown timeout: the requests still
    running end through the app (503 JSON, a stream's error event and ``[DONE]``), none is cancelled."""

    def __init__(self, config: uvicorn.Config, serving: ServingState) -> None:
        super().__init__(config)
        self.serving = serving

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        stopper = asyncio.create_task(self._stop_engines_before(self.config.timeout_graceful_shutdown))
        try:
            await super().shutdown(sockets)
        finally:  # the lifespan has stopped the engines by now (a stop under way: it waited for it)
            stopper.cancel()
            await asyncio.gather(stopper, return_exceptions=True)

    async def _stop_engines_before(self, timeout_s: float | None) -> None:
        if timeout_s is None:  # uvicorn waits for the requests as long as they run: it cancels none
            return
        await asyncio.sleep(max(0.0, timeout_s - 1.0))  # 1 s for their last step and the answers to go
        log.info("shutdown timeout near: stopping the engines; the requests still running get 503")
        await asyncio.gather(*(m.engine.stop() for m in self.serving.models if m.engine is not None))


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    watch = RankWatch()
    app = create_app(
        models=build_models(args, watch),
        embedder=build_embedder(args),
        load_embedder=args.embedding_model == "minilm",
    )
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=args.access_log,
        log_config=None,  # keep the basicConfig above
        timeout_graceful_shutdown=args.shutdown_timeout,
    )
    watch.server = server = EngineServer(config, app.state["serving"])
    try:
        server.run()
    finally:  # uvicorn re-raises the signal that stopped it: the workers stop first
        watch.close()
    if watch.lost is not None:
        raise SystemExit(f"stopped: a tensor/pipeline-parallel rank was lost: {watch.lost}")


if __name__ == "__main__":
    relaunch_with_intel_openmp()  # before torch: Intel's OpenMP runtime when installed
    main()
