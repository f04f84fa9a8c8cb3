"""The ranks of a tensor- or pipeline-parallel engine: what rank 0 starts (``start_ranks``), what every
rank builds (``build_shard``: its part of the model), and the process of ranks 1..N-1 (``run_worker``).

Start-up, rank 0 and each worker side by side:

    rank 0 (the engine)                          rank r (a spawned process)
    spawn the workers, open the store            import torch, "hello"
    join the group                               join the group
    load and partition its shard                 load and partition its shard, "loaded"
    plan the KV cache, send ("plan", plan)       allocate its KV cache shard from the plan, "ready"
    every step: send the inputs, run its part    every step: run its part of each micro-batch

The process group, layers and step RPC are ``backends/engine/parallel/``; this module sits above the
models (which import that package), so the worker can build a model.
"""

from __future__ import annotations

import logging
import pickle
import signal
from dataclasses import dataclass
from functools import partial
from multiprocessing.connection import Connection

import torch

from backends.engine.config import EngineConfig
from backends.engine.cpu_allocator import keep_freed_memory
from backends.engine.errors import EngineDeadError
from backends.engine.kv_sizing import KVCachePlan
from backends.engine.loader import LoadedModel, ModelLoader
from backends.engine.model_runner import ModelRunner
from backends.engine.models import build_model
from backends.engine.models.llama import LlamaForCausalLM
from backends.engine.parallel import micro_batches
from backends.engine.parallel.group import (
    ParallelGroup,
    ParallelLayout,
    connect_store,
    create_store,
    destroy_group,
    init_group,
)
from backends.engine.parallel.workers import WorkerPool, receive, report_failure, send, serve_steps

log = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 600.0
"""How long rank 0 waits for a live worker to start, load its shard or allocate its cache (a worker
that dies is noticed at once)."""


@dataclass(frozen=True)
class RankSpec:
    """What a worker process is started with (pickled to it)."""

    config: EngineConfig
    loader: ModelLoader
    """Loads the model by name in the worker; a module-level function, so it pickles."""
    store_port: int
    max_position: int
    num_threads: int
    """torch threads of each rank on CPU."""


def layout_of(config: EngineConfig) -> ParallelLayout:
    return ParallelLayout(config.tensor_parallel_size, config.pipeline_parallel_size)


def rank_device(device: torch.device, rank: int) -> torch.device:
    """Rank ``rank``'s device when rank 0's is ``device``: the same CPU, or GPU number ``rank``."""
    if device.type != "cuda":
        return device
    if rank >= torch.cuda.device_count():
        raise ValueError(f"rank {rank} needs a GPU of its own; this machine has {torch.cuda.device_count()}")
    return torch.device("cuda", rank)


def start_ranks(
    config: EngineConfig,
    loader: ModelLoader,
    loaded: LoadedModel,
    *,
    device: torch.device,
    dtype: torch.dtype,
    max_position: int,
    num_threads: int,
) -> tuple[WorkerPool, LlamaForCausalLM]:
    """Start ranks 1..N-1, join them, and build rank 0's shard from ``loaded`` (the workers load their
    own meanwhile). The pool's caches wait for the KV plan (``start_runners``)."""
    layout = layout_of(config)
    rank_device(device, layout.world_size - 1)  # refuse a missing GPU before any process starts
    store = create_store(layout.world_size, config.distributed_timeout_s)
    spec = RankSpec(config, loader, store.port, max_position, num_threads)
    try:
        pickle.dumps(spec)
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        raise ValueError(f"a parallel engine's loader must pickle (a module-level function): {exc}") from exc
    pool = WorkerPool.spawn(run_worker, [(spec, rank) for rank in range(1, layout.world_size)])
    try:
        pool.wait_for("hello", STARTUP_TIMEOUT_S)
        group = init_group(layout, 0, store, device, config.distributed_timeout_s)
        pool.group, pool.micro_batches = group, config.pipeline_micro_batches
        model = build_shard(
            loaded,
            group,
            dtype=dtype,
            device=device,
            max_position=max_position,
            batch_hint=config.max_num_batched_tokens,
        )
        pool.wait_for("loaded", STARTUP_TIMEOUT_S)
    except BaseException as exc:
        pool.close()
        if pool.lost is not None and not isinstance(exc, EngineDeadError):  # say which rank, not the symptom
            raise EngineDeadError(pool.lost) from exc
        raise
    return pool, model


def start_runners(pool: WorkerPool, plan: KVCachePlan) -> None:
    """Give every worker the KV plan rank 0 made and wait until each has allocated its cache shard."""
    try:
        pool.send_all(("plan", plan))
        pool.wait_for("ready", STARTUP_TIMEOUT_S)
    except BaseException:
        pool.close()
        raise


def build_shard(
    loaded: LoadedModel,
    group: ParallelGroup,
    *,
    dtype: torch.dtype,
    device: torch.device,
    max_position: int,
    batch_hint: int,
) -> LlamaForCausalLM:
    """``group``'s rank's part of ``loaded``'s model, as ``models.instantiate`` builds a whole one: on
    ``device`` in ``dtype`` with its weights (each layer keeps its slice of the checkpoint's), in eval
    mode, its GEMM weights prepacked for batches of about ``batch_hint`` rows."""
    with torch.device(device):
        model = build_model(loaded.model_config, max_position=max_position)
        model.partition(group)
    model.to(dtype=dtype)
    model.load_weights((name, t.to(dtype)) for name, t in loaded.weights)
    model.eval()
    model.prepack(batch_hint)
    return model


def build_runner(model: LlamaForCausalLM, plan: KVCachePlan, config: EngineConfig) -> ModelRunner:
    """A worker's runner: its KV cache shard, as many blocks as rank 0's (as ``LLMEngine`` builds its
    own, without CUDA graphs: a graph would capture the collectives of one step)."""
    return ModelRunner(
        model,
        num_blocks=plan.sizes.num_blocks,
        num_sliding_blocks=plan.sizes.num_sliding_blocks,
        block_size=config.block_size,
        sliding_window=plan.window,
        quantization=config.quantization,
        kv_cache_dtype=config.kv_cache_dtype,
    )


def run_worker(spec: RankSpec, rank: int, conn: Connection) -> None:
    """The process of rank ``rank`` (1..N-1): join, build its shard and cache, then run every step rank 0
    sends until it says exit or goes away. A failure is reported to rank 0 and ends the process."""
    config = spec.config
    layout = layout_of(config)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is rank 0's to handle: it stops us
    try:
        device = rank_device(torch.device(_device_name(config.device)), rank)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        else:
            torch.set_num_threads(spec.num_threads)
            keep_freed_memory()
        send(conn, "hello")
        store = connect_store(spec.store_port, layout.world_size, config.distributed_timeout_s)
        group = init_group(layout, rank, store, device, config.distributed_timeout_s)
        model = build_shard(
            spec.loader(config.model),
            group,
            dtype=_DTYPES[config.dtype],
            device=device,
            max_position=spec.max_position,
            batch_hint=config.max_num_batched_tokens,
        )
        send(conn, "loaded")
        runner = build_runner(model, receive(conn, "plan"), config)
        send(conn, "ready")
        stage = partial(micro_batches.run_stage, runner.model, group.traffic, logits_last=False)
        serve_steps(conn, stage, device)
    except EOFError:  # rank 0 went away (or closed the engine) before start-up finished
        pass
    except BaseException:
        report_failure(conn, rank)
    finally:
        destroy_group()


_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _device_name(device: str) -> str:
    """``EngineConfig.device`` resolved as rank 0 resolves it ("auto": cuda when available)."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device
