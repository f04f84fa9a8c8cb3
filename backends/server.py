"""The reference engine's OpenAI-compatible server: ``python -m backends.server --model smollm2-135m``.

Several models in one process: ``--model smollm2-135m --model gemma3-270m``; ``--model NAME=SOURCE``
serves SOURCE under another name. Names whose SOURCE is the same share one engine (one copy of the
weights, one KV pool, one queue); each distinct engine gets an equal share of the KV budget and its own
scheduler, and their steps take turns on the CPU. The port opens at once; the weights load in a worker
thread (progress in the log) and ``/ready`` and ``/v1/models`` answer 503 until every model is in.
See docs/engine.md.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import threading
from collections.abc import Sequence

from backends.openmp import loaded_runtime, relaunch_with_intel_openmp
from backends.serving.app import ModelSpec, create_app
from backends.serving.engine_client import AsyncEngineLike
from backends.serving.state import EmbedderLike

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
        "(CPU; LM head and embeddings stay float)",
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
    parser.add_argument("--ngram-prompt-lookup-max", type=int, default=4)
    parser.add_argument("--ngram-prompt-lookup-min", type=int, default=1)
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument(
        "--kv-cache-bytes", type=int, default=None, help="KV-cache budget in bytes, shared by the models"
    )
    parser.add_argument("--no-prefix-caching", action="store_true")
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
    args = parser.parse_args(argv)
    args.model = args.model or ["smollm2-135m"]
    if args.served_model_name and len(args.model) > 1:
        parser.error("--served-model-name names the one --model; with several, use --model NAME=SOURCE")
    try:
        args.models = served_models(args.model, args.served_model_name)
    except ValueError as exc:
        parser.error(str(exc))
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


def _source_key(source: str) -> str:
    """One key per set of weights: a path is compared by where it really is."""
    return os.path.realpath(source) if os.path.exists(source) else source


def build_models(args: argparse.Namespace) -> list[ModelSpec]:
    """One spec per distinct source, each building its engine (once per process) when the app starts."""
    share = len(args.models)
    step_lock = threading.Lock() if share > 1 else None  # engines on one CPU take turns, not fight
    return [
        ModelSpec(tuple(names), factory=functools.partial(build_engine, args, source, share, step_lock))
        for source, names in args.models.items()
    ]


def build_engine(
    args: argparse.Namespace, source: str, share: int = 1, step_lock: threading.Lock | None = None
) -> AsyncEngineLike:
    """Load one model's weights and wrap its engine in the async front; ``share`` engines split the
    KV budget equally."""
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
        ngram_prompt_lookup_max=args.ngram_prompt_lookup_max,
        ngram_prompt_lookup_min=args.ngram_prompt_lookup_min,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=args.max_model_len,
        kv_cache_bytes=None if args.kv_cache_bytes is None else args.kv_cache_bytes // share,
        kv_cache_fraction=defaults.kv_cache_fraction / share,
        enable_prefix_caching=not args.no_prefix_caching,
        num_threads=args.num_threads,
        seed=args.seed,
    )
    log.info("loading model %s (%s)", source, args.dtype)
    engine = LLMEngine(config)
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


def main(argv: Sequence[str] | None = None) -> None:
    import uvicorn

    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app = create_app(
        models=build_models(args),
        embedder=build_embedder(args),
        load_embedder=args.embedding_model == "minilm",
    )
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        access_log=args.access_log,
        log_config=None,  # keep the basicConfig above
        timeout_graceful_shutdown=5,
    )


if __name__ == "__main__":
    relaunch_with_intel_openmp()  # before torch: Intel's OpenMP runtime when installed
    main()
