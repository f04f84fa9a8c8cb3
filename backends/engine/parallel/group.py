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
from dataclasses import dataclass, field

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


class StageTraffic:
    """This rank's point-to-point traffic of one step: which micro-batch it is at (the tag that keeps
    one micro-batch's hidden states and logits apart from the next one's), its sends in flight, and its
    receives posted ahead (over gloo).

    Sends never block (``isend``): a stage hands micro-batch k on and goes on with k + 1 while the next
    stage computes k. Each send's tensor is kept until ``wait_all``, which ends every step. Receives are
    posted for every micro-batch when the step begins (``begin``), as soon as this rank has seen once
    what it receives (from whom, how wide): gloo moves a message only once its receive is posted, so a
    receive posted late would wait for the sender's process to be scheduled again."""

    def __init__(self) -> None:
        self.micro_batch = 0
        self._pending: list[tuple[dist.Work, torch.Tensor]] = []
        self._expected: dict[tuple[int, bool], torch.Tensor] = {}
        """(source rank, one row a token?) -> a [0, width] tensor of the dtype and device received."""
        self._posted: dict[tuple[int, bool, int], tuple[dist.Work, torch.Tensor]] = {}

    def begin(self, sizes: list[tuple[int, int]]) -> None:
        """A step of micro-batches of (tokens, sampled rows) each: post the receives of all of them.
        Over gloo only: NCCL runs a pair's sends and receives on one stream in the order they were
        issued, where a receive posted ahead would hold back this rank's sends to the same peer."""
        if dist.get_backend() != "gloo":
            return
        for (src, per_token), like in self._expected.items():
            for k, (tokens, rows) in enumerate(sizes):
                buffer = like.new_empty(tokens if per_token else rows, like.shape[1])
                work = dist.irecv(buffer, src=src, tag=k)
                assert work is not None  # None only for a rank outside the group
                self._posted[src, per_token, k] = (work, buffer)

    def isend(self, tensor: torch.Tensor, dst: int) -> None:
        tensor = tensor.contiguous()
        work = dist.isend(tensor, dst=dst, tag=self.micro_batch)
        assert work is not None
        self._pending.append((work, tensor))

    def recv(self, like: torch.Tensor, src: int, *, per_token: bool) -> torch.Tensor:
        """What ``src`` sent for the current micro-batch, shaped as ``like`` ([tokens or sampled rows,
        width]): the receive posted for it, or (the first time) ``like`` filled by a blocking one."""
        posted = self._posted.pop((src, per_token, self.micro_batch), None)
        if posted is not None:
            work, buffer = posted
            assert buffer.shape == like.shape, (buffer.shape, like.shape)
            work.wait()
            return buffer
        self._expected[src, per_token] = like.new_empty(0, like.shape[1])
        dist.recv(like, src=src, tag=self.micro_batch)
        return like

    def wait_all(self) -> None:
        """Wait until every send of the step has been received."""
        for work, _ in self._pending:
            work.wait()
        self.reset()

    def reset(self) -> None:
        """Forget the step's sends and receives (after a failed step the pool is lost: nobody will
        receive or send them)."""
        self._pending.clear()
        self._posted.clear()
        self.micro_batch = 0


@dataclass(frozen=True)
class ParallelGroup:
    """This process's place among the ranks of one parallel engine, once ``init_group`` joined them."""

    layout: ParallelLayout
    rank: int
    tp_group: dist.ProcessGroup | None
    """The tensor-parallel group of this rank's stage (None: the whole world, or no tensor parallelism)."""
    traffic: StageTraffic = field(default_factory=StageTraffic, compare=False, repr=False)
    """This rank's hidden states and logits in flight between stages (``pipeline.py``, the LM head)."""

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

    @property
    def backend(self) -> str:
        """The process group's backend: "gloo" (CPU) or "nccl" (CUDA)."""
        return str(dist.get_backend())

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
