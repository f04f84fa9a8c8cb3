"""The reference engine's OpenAI-compatible server: ``python -m backends.server --model smollm2-135m``.

The port opens at once; the weights load in a worker thread (progress in the log) and ``/ready`` and
``/v1/models`` answer 503 until they are in. See the README.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

from backends.serving.app import create_app
from backends.serving.engine_client import AsyncEngineLike
from backends.serving.state import EmbedderLike

log = logging.getLogger("backends.server")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m backends.server", description=__doc__)
    parser.add_argument(
        "--model", default="smollm2-135m", help="smollm2-135m, a HF safetensors dir or a .gguf"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--served-model-name", default=None, help="the name clients use (default: --model)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--device", default="auto")
    parser.add_argument("--max-num-seqs", type=int, default=64)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument("--kv-cache-bytes", type=int, default=None, help="KV-cache budget in bytes")
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
    return parser.parse_args(argv)


def build_engine(args: argparse.Namespace) -> AsyncEngineLike:
    """Load the weights (once per process) and wrap the engine in its async front."""
    from backends.engine.async_engine import AsyncLLMEngine
    from backends.engine.config import EngineConfig
    from backends.engine.llm_engine import LLMEngine

    config = EngineConfig(
        model=args.model,
        dtype=args.dtype,
        device=args.device,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=args.max_model_len,
        kv_cache_bytes=args.kv_cache_bytes,
        enable_prefix_caching=not args.no_prefix_caching,
        num_threads=args.num_threads,
        seed=args.seed,
    )
    log.info("loading model %s (%s)", args.model, args.dtype)
    engine = LLMEngine(config)
    log.info("model %s loaded: max_model_len %d", engine.model_name, engine.max_model_len)
    return AsyncLLMEngine(engine, max_waiting=args.max_waiting)


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
        engine_factory=lambda: build_engine(args),
        embedder=build_embedder(args),
        load_embedder=args.embedding_model == "minilm",
        served_model_name=args.served_model_name or args.model,
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
    main()
