"""CUDA graphs for decode steps: one graph per batch-size bucket, captured at start-up, replayed with the
step's inputs padded to the bucket (vLLM's and nano-vllm's scheme).

A decode step launches the same few hundred small kernels every time; on a GPU their launch cost, not the
math, bounds a small batch. A captured graph launches them all at once. A graph replays fixed shapes and
fixed addresses, so every graph reads one set of static buffers (``DecodeBuffers``): the step's token ids,
positions and, per attention view, slot mapping, block tables and lengths, copied in before the replay.
Rows past the step's batch are padding: they write their K/V to a scratch block the block manager never
hands out (the one past the pool's last block, which the model runner allocates), read only it, and
their outputs are dropped. Prefill and mixed steps, batches above the largest bucket and block tables
wider than the buffers run eagerly.

The buckets, the padding and the buffer layout are plain functions of tensors, tested on the CPU;
``DecodeGraphs`` captures through a ``GraphCapturer``: ``CudaGraphCapturer`` on CUDA, and its twin
``EagerGraphCapturer`` (replay calls the captured function again) on any device, which tests inject.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch
from torch import nn

from backends.engine.layers.attention import AttentionMetadata

if TYPE_CHECKING:
    from torch.cuda import _POOL_HANDLE

log = logging.getLogger(__name__)

MAX_GRAPH_BATCH_SIZE = 512
"""No graph is captured for more sequences than this (nano-vllm's cap)."""


class CapturedGraph(Protocol):
    """One captured decode forward: ``replay()`` recomputes ``output`` from the static buffers."""

    output: torch.Tensor

    def replay(self) -> None: ...


class GraphCapturer(Protocol):
    """Captures a function of the static buffers into a graph that replays it."""

    def capture(self, fn: Callable[[], torch.Tensor]) -> CapturedGraph: ...


@dataclass(frozen=True)
class CudaGraphConfig:
    """What the model runner captures decode graphs for (``graph_config`` builds it)."""

    capturer: GraphCapturer
    max_num_seqs: int
    """The largest bucket: no step decodes more sequences."""
    max_model_len: int
    """Bounds every block table, so it sets the buffers' width."""


@dataclass(frozen=True)
class ViewLayout:
    """One attention view's decode inputs in the static buffers (the full view, or the sliding one)."""

    window: int | None
    """The view's sliding window (None: full attention), as ``AttentionMetadata.sliding_window``."""
    max_blocks: int
    """Width of the block-table buffer: the most blocks a decode's table holds in this view."""
    scratch_block: int
    """The block padding rows write to and read from: past the last block of this view's pool."""


@dataclass(frozen=True)
class DecodeGraphLayout:
    """The static buffers' shapes: ``batch_sizes[-1]`` rows, and one ``ViewLayout`` per attention view."""

    batch_sizes: tuple[int, ...]
    block_size: int
    views: tuple[ViewLayout, ...]
    """The step's main view, then its sliding view when the model mixes sliding and full layers."""

    @property
    def max_batch_size(self) -> int:
        return self.batch_sizes[-1]


def graph_batch_sizes(max_num_seqs: int) -> tuple[int, ...]:
    """The buckets: 1, 2, 4, 8, then every multiple of 16, up to ``max_num_seqs`` (at most
    ``MAX_GRAPH_BATCH_SIZE``), which is a bucket itself so the largest batch never runs eagerly."""
    limit = min(max_num_seqs, MAX_GRAPH_BATCH_SIZE)
    sizes = [b for b in (1, 2, 4, 8) if b <= limit] + list(range(16, limit + 1, 16))
    if sizes[-1] != limit:
        sizes.append(limit)
    return tuple(sizes)


def bucket_for(num_seqs: int, batch_sizes: Sequence[int]) -> int | None:
    """The smallest bucket that holds ``num_seqs`` rows; None above the largest (the step runs eagerly)."""
    return next((b for b in batch_sizes if b >= num_seqs), None)


def table_width(max_model_len: int, block_size: int, window: int | None) -> int:
    """The most blocks a decode's table holds: every block of a full-length sequence, or, in a windowed
    view, the window's blocks plus the one its start cuts into."""
    full = -(-max_model_len // block_size)
    return full if window is None else min(full, -(-window // block_size) + 1)


def decode_graph_layout(
    max_num_seqs: int, max_model_len: int, block_size: int, views: Sequence[tuple[int | None, int]]
) -> DecodeGraphLayout:
    """The layout for ``views``: (window, scratch block) of each attention view, main view first."""
    return DecodeGraphLayout(
        graph_batch_sizes(max_num_seqs),
        block_size,
        tuple(ViewLayout(w, table_width(max_model_len, block_size, w), scratch) for w, scratch in views),
    )


def load_rows(dst: torch.Tensor, src: torch.Tensor, fill: int) -> None:
    """``dst[:len(src)] = src``, and ``fill`` in every row after it (the padding)."""
    n = src.shape[0]
    dst[:n].copy_(src)
    dst[n:].fill_(fill)


def load_table(dst: torch.Tensor, src: torch.Tensor, fill: int) -> None:
    """Block tables ``src`` [n, width] into the top-left of ``dst`` [rows, max_blocks]; ``fill`` (the
    scratch block) in the columns past ``width`` and in the padding rows."""
    n, width = src.shape
    dst[:n, :width].copy_(src)
    dst[:n, width:].fill_(fill)
    dst[n:].fill_(fill)


def views_of(meta: AttentionMetadata) -> list[AttentionMetadata]:
    """The step's attention views in the layout's order: the main one, then the sliding one if any."""
    return [meta] if meta.sliding_view is None else [meta, meta.sliding_view]


class DecodeBuffers:
    """The static inputs every graph reads, its first ``bucket`` rows: token ids and positions, and per
    view the slot mapping, block tables and lengths. Built holding padding only (scratch slot, scratch
    block, length 1), so capturing never touches a real block."""

    def __init__(self, layout: DecodeGraphLayout, device: torch.device) -> None:
        self.layout = layout
        rows, bs = layout.max_batch_size, layout.block_size
        self.input_ids = torch.zeros(rows, dtype=torch.long, device=device)
        self.positions = torch.zeros(rows, dtype=torch.long, device=device)
        self.slot_mapping = [
            torch.full((rows,), v.scratch_block * bs, dtype=torch.long, device=device) for v in layout.views
        ]
        self.block_tables = [
            torch.full((rows, v.max_blocks), v.scratch_block, dtype=torch.long, device=device)
            for v in layout.views
        ]
        self.lens = [torch.ones(rows, dtype=torch.int32, device=device) for _ in layout.views]

    def fits(self, meta: AttentionMetadata) -> bool:
        """A decode-only step whose batch and block tables the buffers hold."""
        views = views_of(meta)
        n = meta.num_decode_tokens
        return (
            not meta.prefills
            and 0 < n == meta.slot_mapping.shape[0]
            and n <= self.layout.max_batch_size
            and len(views) == len(self.layout.views)
            and all(
                v.decode_blocks is not None and v.decode_blocks.shape[1] <= lv.max_blocks
                for v, lv in zip(views, self.layout.views, strict=True)
            )
        )

    def load(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> None:
        """Copy a decode step (``fits``) in, padding every row past its batch."""
        bs = self.layout.block_size
        load_rows(self.input_ids, input_ids, 0)
        load_rows(self.positions, positions, 0)
        for i, (view, lv) in enumerate(zip(views_of(meta), self.layout.views, strict=True)):
            assert view.decode_blocks is not None and view.decode_lens is not None
            load_rows(self.slot_mapping[i], view.slot_mapping, lv.scratch_block * bs)
            load_table(self.block_tables[i], view.decode_blocks, lv.scratch_block)
            load_rows(self.lens[i], view.decode_lens, 1)

    def metadata(self, batch_size: int) -> AttentionMetadata:
        """A fresh ``AttentionMetadata`` over the first ``batch_size`` rows (fresh each call: the
        metadata caches its decode mask, and the eager twin runs the forward again on each replay)."""
        views = [
            AttentionMetadata(
                slot_mapping=self.slot_mapping[i][:batch_size],
                block_size=self.layout.block_size,
                num_decode_tokens=batch_size,
                decode_blocks=self.block_tables[i][:batch_size],
                decode_lens=self.lens[i][:batch_size],
                sliding_window=lv.window,
            )
            for i, lv in enumerate(self.layout.views)
        ]
        if len(views) > 1:
            views[0].sliding_view = views[1]
        return views[0]


class DecodeGraphs:
    """The decode forward of ``model`` captured once per bucket of ``layout``, replayed on padded inputs."""

    def __init__(
        self, model: nn.Module, layout: DecodeGraphLayout, capturer: GraphCapturer, device: torch.device
    ) -> None:
        self.model = model
        self.layout = layout
        self.graphs: dict[int, CapturedGraph] = {}
        with torch.inference_mode():
            self.buffers = DecodeBuffers(layout, device)
            for batch_size in reversed(layout.batch_sizes):  # largest first: the rest reuse its memory
                self.graphs[batch_size] = capturer.capture(functools.partial(self._forward, batch_size))
        log.info("captured decode graphs for batch sizes %s", list(layout.batch_sizes))

    def _forward(self, batch_size: int) -> torch.Tensor:
        """The model over the buffers' first ``batch_size`` rows (fresh slices: the rotary table caches
        its rows by the positions tensor's identity)."""
        buffers = self.buffers
        meta = buffers.metadata(batch_size)
        return self.model(buffers.input_ids[:batch_size], buffers.positions[:batch_size], meta)

    def can_replay(self, meta: AttentionMetadata) -> bool:
        """The step decodes only, and a bucket and the buffers hold it."""
        return self.buffers.fits(meta)

    def replay(
        self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        """Hidden states [num_decodes, hidden] of a step that ``can_replay``: its inputs padded into the
        buffers, its bucket's graph replayed, the padding rows' outputs dropped."""
        num_seqs = meta.num_decode_tokens
        batch_size = bucket_for(num_seqs, self.layout.batch_sizes)
        assert batch_size is not None, "can_replay() first"
        self.buffers.load(input_ids, positions, meta)
        graph = self.graphs[batch_size]
        graph.replay()
        return graph.output[:num_seqs]


class CudaGraphCapturer:
    """``torch.cuda.CUDAGraph`` capture on the current device; all graphs share one memory pool, so a
    smaller bucket reuses the memory of the largest, captured first."""

    def __init__(self) -> None:
        self._pool: _POOL_HANDLE | None = None

    def capture(self, fn: Callable[[], torch.Tensor]) -> CapturedGraph:
        # warm-up outside the graph: lazy set-up (cuBLAS workspaces, Triton compilation) must not be captured
        fn()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            output = fn()
        if self._pool is None:
            self._pool = graph.pool()
        torch.cuda.synchronize()
        return _CudaGraph(graph, output)


class _CudaGraph:
    def __init__(self, graph: torch.cuda.CUDAGraph, output: torch.Tensor) -> None:
        self.graph = graph
        self.output = output

    def replay(self) -> None:
        self.graph.replay()


class EagerGraphCapturer:
    """CUDA graphs' twin on any device: ``capture`` runs the function once and keeps its output as the
    static output; ``replay`` runs it again into that output. Counts both, for tests."""

    def __init__(self) -> None:
        self.num_captures = 0
        self.num_replays = 0

    def capture(self, fn: Callable[[], torch.Tensor]) -> CapturedGraph:
        self.num_captures += 1
        return _EagerGraph(self, fn, fn())


class _EagerGraph:
    def __init__(
        self, owner: EagerGraphCapturer, fn: Callable[[], torch.Tensor], output: torch.Tensor
    ) -> None:
        self.owner = owner
        self.fn = fn
        self.output = output

    def replay(self) -> None:
        self.owner.num_replays += 1
        self.output.copy_(self.fn())


def graph_config(
    *,
    enforce_eager: bool,
    device: torch.device,
    max_num_seqs: int,
    max_model_len: int,
    capturer: GraphCapturer | None = None,
) -> CudaGraphConfig | None:
    """Decode graphs unless ``enforce_eager``: through ``capturer`` when one is given (any device: the
    tests' eager twin), else CUDA's on a CUDA device; None (eager) elsewhere."""
    if enforce_eager:
        return None
    if capturer is None:
        if device.type != "cuda":
            return None
        capturer = CudaGraphCapturer()
    return CudaGraphConfig(capturer, max_num_seqs, max_model_len)
