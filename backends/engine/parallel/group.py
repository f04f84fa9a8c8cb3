"""The layout of a tensor- and pipeline-parallel engine's ranks, and the torch.distributed group joining them.

Ranks are numbered stage-major: ``rank = pp_rank * tensor_parallel_size + tp_rank``. Rank 0 (stage 0,
tensor rank 0) is the engine's own process, which also schedules and samples; the others are workers.
Each pipeline stage is a tensor-parallel group of ``tensor_parallel_size`` ranks; a stage hands its hidden
states to the same tensor rank of the next stage.

``ParallelLayout`` is pure arithmetic (which heads, layers and vocabulary rows a rank holds; whether a
model can be split so at all); ``ParallelGroup`` is one process's place in a live group, made by
``init_group`` and torn down by ``destroy_group``. torch.distributed keeps its default group per process,
so one process belongs to at most one parallel engine.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import torch
import torch.distributed as dist

from backends.engine.model_config import ModelConfig

LOOPBACK = "127.0.0.1"
"""Every rank runs on this machine: the rendezvous store listens on loopback only."""


@dataclass(frozen=True)
class HeadSplit:
    """One tensor rank's attention heads: query heads ``[first_head, first_head + num_heads)`` and the KV
    heads they read, ``[first_kv_head, first_kv_head + num_kv_heads)`` (one replicated head when the
    model has fewer KV heads than ranks)."""

    num_heads: int
    num_kv_heads: int
    first_head: int
    first_kv_head: int


@dataclass(frozen=True)
class ParallelLayout:
    """How many ranks split the model, and how; the sizes are vLLM's ``--tensor-parallel-size`` and
    ``--pipeline-parallel-size``."""

    tensor_parallel_size: int = 1
    """Ranks that split every layer (attention heads, MLP columns, vocabulary)."""
    pipeline_parallel_size: int = 1
    """Stages that split the decoder layers into contiguous runs, one stage after another."""

    def __post_init__(self) -> None:
        if self.tensor_parallel_size < 1 or self.pipeline_parallel_size < 1:
            raise ValueError("tensor_parallel_size and pipeline_parallel_size must be >= 1")

    @property
    def world_size(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    def coords(self, rank: int) -> tuple[int, int]:
        """(pipeline stage, tensor rank) of global ``rank``."""
        return divmod(rank, self.tensor_parallel_size)

    def rank_of(self, pp_rank: int, tp_rank: int) -> int:
        return pp_rank * self.tensor_parallel_size + tp_rank

    def check(self, cfg: ModelConfig) -> None:
        """Raise ValueError when ``cfg`` cannot be split this way: the tensor ranks must divide the query
        heads and the MLP columns, and the KV heads must divide among the ranks or the ranks among them
        (then each KV head is replicated on ``size / num_kv_heads`` ranks); every stage needs a layer."""
        tp = self.tensor_parallel_size
        heads, kv_heads = cfg.num_heads, cfg.num_kv_heads
        if heads % tp:
            raise ValueError(
                f"tensor_parallel_size={tp} does not divide the model's {heads} query heads "
                f"({kv_heads} KV heads); use a size that divides {heads}"
            )
        if kv_heads % tp and tp % kv_heads:
            raise ValueError(
                f"tensor_parallel_size={tp} neither divides the model's {kv_heads} KV heads nor is a "
                f"multiple of them ({heads} query heads), so KV heads can be neither split nor replicated"
            )
        if cfg.intermediate_size % tp:
            raise ValueError(
                f"tensor_parallel_size={tp} does not divide the model's MLP size {cfg.intermediate_size}"
            )
        if cfg.num_layers < self.pipeline_parallel_size:
            raise ValueError(
                f"pipeline_parallel_size={self.pipeline_parallel_size} is more stages than the model's "
                f"{cfg.num_layers} layers"
            )

    def split_heads(self, num_heads: int, num_kv_heads: int, tp_rank: int) -> HeadSplit:
        """The heads tensor rank ``tp_rank`` holds (``check`` has passed): its query heads, and the KV
        heads their groups read: a share of them, or the one they all read when KV heads are fewer
        than ranks (each then held by ``size / num_kv_heads`` ranks, as vLLM replicates them)."""
        tp = self.tensor_parallel_size
        local_heads = num_heads // tp
        local_kv = self.kv_heads_per_rank(num_kv_heads)
        first_kv = tp_rank * local_kv if num_kv_heads >= tp else tp_rank * num_kv_heads // tp
        return HeadSplit(local_heads, local_kv, tp_rank * local_heads, first_kv)

    def kv_heads_per_rank(self, num_kv_heads: int) -> int:
        """KV heads in each rank's cache: a share, or one replicated head."""
        return max(1, num_kv_heads // self.tensor_parallel_size)

    def stage_layers(self, num_layers: int, pp_rank: int) -> range:
        """Decoder layers of stage ``pp_rank``: contiguous runs as even as they divide, the later stages
        taking the remainder (stage 0 shares its process with the scheduler and the sampler)."""
        pp = self.pipeline_parallel_size
        base, extra = divmod(num_layers, pp)
        first_long = pp - extra
        start = pp_rank * base + max(0, pp_rank - first_long)
        return range(start, start + base + (pp_rank >= first_long))

    def max_stage_layers(self, num_layers: int) -> int:
        """Layers of the most loaded stage: its KV cache bounds every rank's blocks."""
        return -(-num_layers // self.pipeline_parallel_size)

    def vocab_rows(self, vocab_size: int, tp_rank: int) -> tuple[int, int]:
        """(first row, rows per rank) of the vocabulary slice tensor rank ``tp_rank`` holds: equal slices,
        the last padded past ``vocab_size`` (padding rows are zero and their logits cut off)."""
        per_rank = -(-vocab_size // self.tensor_parallel_size)
        return tp_rank * per_rank, per_rank


@dataclass(frozen=True)
class ParallelGroup:
    """This process's place among the ranks of one parallel engine, once ``init_group`` joined them."""

    layout: ParallelLayout
    rank: int
    tp_group: dist.ProcessGroup | None
    """The tensor-parallel group of this rank's stage (None: the whole world, or no tensor parallelism)."""

    @property
    def tp_size(self) -> int:
        return self.layout.tensor_parallel_size

    @property
    def pp_size(self) -> int:
        return self.layout.pipeline_parallel_size

    @property
    def pp_rank(self) -> int:
        return self.layout.coords(self.rank)[0]

    @property
    def tp_rank(self) -> int:
        return self.layout.coords(self.rank)[1]

    @property
    def is_first_stage(self) -> bool:
        return self.pp_rank == 0

    @property
    def is_last_stage(self) -> bool:
        return self.pp_rank == self.pp_size - 1

    @property
    def prev_rank(self) -> int:
        """The rank this one receives hidden states from (same tensor rank, previous stage)."""
        return self.layout.rank_of(self.pp_rank - 1, self.tp_rank)

    @property
    def next_rank(self) -> int:
        """The rank this one sends hidden states to (same tensor rank, next stage)."""
        return self.layout.rank_of(self.pp_rank + 1, self.tp_rank)

    @property
    def tp_first_rank(self) -> int:
        """The global rank of tensor rank 0 in this rank's stage: where the vocabulary's logits gather."""
        return self.layout.rank_of(self.pp_rank, 0)

    @property
    def logits_rank(self) -> int:
        """The rank whose gathered logits rank 0 samples from: tensor rank 0 of the last stage."""
        return self.layout.rank_of(self.pp_size - 1, 0)

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` in place over this stage's tensor ranks."""
        dist.all_reduce(tensor, group=self.tp_group)
        return tensor


def create_store(world_size: int, timeout_s: float) -> dist.TCPStore:
    """Rank 0's rendezvous store on a free loopback port (``store.port``; chosen by the OS, no race)."""
    return dist.TCPStore(
        LOOPBACK,
        0,
        world_size,
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=timeout_s),
    )


def connect_store(port: int, world_size: int, timeout_s: float) -> dist.TCPStore:
    """A worker's connection to rank 0's store."""
    return dist.TCPStore(
        LOOPBACK, port, world_size, is_master=False, timeout=datetime.timedelta(seconds=timeout_s)
    )


def init_group(
    layout: ParallelLayout, rank: int, store: dist.Store, device: torch.device, timeout_s: float
) -> ParallelGroup:
    """Join the engine's ranks (gloo on CPU, NCCL on CUDA); every collective then fails after
    ``timeout_s`` rather than wait forever for a rank that is gone. Every rank calls this, and builds
    each stage's tensor-parallel group in the same order."""
    if dist.is_initialized():
        raise RuntimeError(
            "this process already belongs to a torch.distributed group: one tensor- or pipeline-parallel "
            "engine per process"
        )
    timeout = datetime.timedelta(seconds=timeout_s)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend, store=store, rank=rank, world_size=layout.world_size, timeout=timeout)
    tp_group: dist.ProcessGroup | None = None
    if layout.tensor_parallel_size > 1 and layout.pipeline_parallel_size > 1:
        for pp_rank in range(layout.pipeline_parallel_size):
            ranks = [layout.rank_of(pp_rank, t) for t in range(layout.tensor_parallel_size)]
            group = dist.new_group(ranks, timeout=timeout)
            if rank in ranks:
                tp_group = group
    return ParallelGroup(layout, rank, tp_group)


def destroy_group() -> None:
    """Leave the group this process joined (a no-op when it joined none)."""
    if dist.is_initialized():
        dist.destroy_process_group()
