"""Turns one scheduled step into a single forward pass over a flat (varlen) token batch.

Decode tokens go first, then each prefill chunk; K/V land in the paged cache through the slot mapping,
and the LM head runs only on each sampling sequence's last token. With a sliding window, every query's
keys start at most ``window - 1`` positions back: decodes get block tables cut to the window's blocks,
prefill chunks a mask that is causal and windowed. A model that mixes sliding and full layers (Gemma 3)
gets both views of the step: the full one, and a windowed one its sliding layers read. With one pool,
every layer's K/V go to the same slots, so the full layers find all of them; with two KV groups
(``num_sliding_blocks``), the sliding layers' K/V live in a pool of their own, and the windowed view
carries that group's slot mapping and block tables (``Sequence.sliding_blocks``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch

from backends.engine.cuda_graphs import CudaGraphConfig, DecodeGraphs, decode_graph_layout
from backends.engine.layers import kv_quant
from backends.engine.layers.attention import AttentionMetadata, PrefillChunk
from backends.engine.layers.quantization import prepare_linears
from backends.engine.model_config import FULL, SLIDING
from backends.engine.models.llama import LlamaAttention, LlamaForCausalLM
from backends.engine.parallel import micro_batches
from backends.engine.parallel.workers import StepInputs, WorkerPool
from backends.engine.scheduler import ScheduledSeq


class ModelRunner:
    """Owns the model and its KV cache: ``num_blocks`` blocks of ``block_size`` slots per layer.

    ``sliding_window``: the window of the sliding layers (None: full attention everywhere). Which
    layers slide comes from ``model.config.layer_types``: all of them when it names none.
    ``num_sliding_blocks``: the sliding layers' own pool (two KV groups); None puts every layer's K/V
    in the one pool of ``num_blocks``.
    ``quantization``: "int8" or "int4" turns the decoder's GEMM weights to that
    (``layers/quantization.py``'s ``prepare_linears``).
    ``kv_cache_dtype``: "int8" or "fp8" stores K/V as one-byte codes with a scale per row
    (``layers/kv_quant.py``); "auto" in the model's dtype.
    ``cuda_graphs``: capture the decode forward per batch bucket (``cuda_graphs.py``); each pool then
    gets one scratch block past its last, which the padding rows of a replay write to."""

    def __init__(
        self,
        model: LlamaForCausalLM,
        *,
        num_blocks: int,
        block_size: int,
        sliding_window: int | None = None,
        num_sliding_blocks: int | None = None,
        quantization: str | None = None,
        kv_cache_dtype: str = "auto",
        cuda_graphs: CudaGraphConfig | None = None,
        workers: WorkerPool | None = None,
    ) -> None:
        self.model = model
        self.workers = workers
        """Ranks 1..N-1 of a tensor/pipeline-parallel engine (this runner is rank 0's); None: one process."""
        self.kv_cache_dtype = kv_cache_dtype
        """"auto" (K/V in the model's dtype), "int8" or "fp8": one-byte codes and a scale per row."""
        self.weight_bytes = prepare_linears(model, quantization)
        """GEMM weight bytes before and after quantization; None when not quantized."""
        self.block_size = block_size
        self.sliding_window = sliding_window
        self.num_blocks = num_blocks
        cfg = model.config
        layer_types = set(cfg.layer_types or ())
        self.has_full_layers = FULL in layer_types
        """Some layer attends fully: the step's main view is unwindowed."""
        self.is_mixed = sliding_window is not None and self.has_full_layers and SLIDING in layer_types
        """Sliding and full layers together: the step also gets a windowed view."""
        self.num_sliding_blocks = num_sliding_blocks
        self.has_two_groups = num_sliding_blocks is not None
        """The sliding layers' K/V live in their own pool (``Sequence.sliding_blocks`` indexes it)."""
        assert not self.has_two_groups or self.is_mixed, "two KV groups need sliding and full layers"
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        attn_layers = [m for m in model.modules() if isinstance(m, LlamaAttention)]
        scratch = 0 if cuda_graphs is None else 1  # the block a graph's padding rows write to
        if num_sliding_blocks is None:
            self.k_cache, self.v_cache = self._allocate(attn_layers, num_blocks + scratch)
        else:
            full = [a for a in attn_layers if not a.is_sliding]
            self.k_cache, self.v_cache = self._allocate(full, num_blocks + scratch)
            sliding = [a for a in attn_layers if a.is_sliding]
            self.sliding_k_cache, self.sliding_v_cache = self._allocate(sliding, num_sliding_blocks + scratch)
        self.decode_graphs = None if cuda_graphs is None else self._capture(cuda_graphs)
        """The decode forward captured per batch bucket; None: every step runs eagerly."""

    def _allocate(self, layers: list[LlamaAttention], num_blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V tensors of ``num_blocks`` blocks for ``layers``, each layer bound to its slice."""
        cfg = self.model.config
        if not layers:  # a pipeline stage with none of this group's layers
            return torch.empty(0, device=self.device), torch.empty(0, device=self.device)
        # a tensor-parallel rank caches only its own KV heads
        layer_shape = layers[0].backend.cache_shape(
            num_blocks, self.block_size, layers[0].num_kv_heads, cfg.head_dim, self.kv_cache_dtype
        )
        shape = (len(layers), *layer_shape)
        dtype = kv_quant.storage_dtype(self.kv_cache_dtype, self.dtype)
        # empty, not zeros: a block's slots past a sequence's length are never written, and every reader
        # masks them (the native kernel stops at the length, the torch path zeroes their values)
        k_cache = torch.empty(shape, dtype=dtype, device=self.device)
        v_cache = torch.empty(shape, dtype=dtype, device=self.device)
        for i, layer in enumerate(layers):
            layer.k_cache, layer.v_cache = k_cache[i], v_cache[i]
        return k_cache, v_cache

    def _capture(self, config: CudaGraphConfig) -> DecodeGraphs:
        """Decode graphs over the step's views as ``_prepare`` builds them, each with its pool's scratch
        block (the one past ``num_blocks``, or past ``num_sliding_blocks`` for the sliding group)."""
        views: list[tuple[int | None, int]] = [
            (None if self.has_full_layers else self.sliding_window, self.num_blocks)
        ]
        if self.is_mixed:
            sliding_scratch = (
                self.num_sliding_blocks if self.num_sliding_blocks is not None else self.num_blocks
            )
            views.append((self.sliding_window, sliding_scratch))
        layout = decode_graph_layout(config.max_num_seqs, config.max_model_len, self.block_size, views)
        return DecodeGraphs(self.model, layout, config.capturer, self.device)

    @torch.inference_mode()
    def run(self, scheduled: list[ScheduledSeq]) -> torch.Tensor:
        """Logits [num_sample_rows, vocab] (fp32): each of ``scheduled``'s last chunks in order, one row
        per token it samples from (its last token's, then one per proposed token when it speculates)."""
        if self.workers is not None:  # tensor/pipeline parallel: every rank runs the step's micro-batches
            return self._run_parallel(scheduled, self.workers)
        step = self._step(scheduled)
        graphs = self.decode_graphs
        if graphs is not None and graphs.can_replay(step.meta):  # decode-only, within the largest bucket
            hidden = graphs.replay(step.input_ids, step.positions, step.meta)
        else:
            hidden = self.model(step.input_ids, step.positions, step.meta)
        return self.model.compute_logits(hidden.index_select(0, step.sample_index)).float()

    def _run_parallel(self, scheduled: list[ScheduledSeq], workers: WorkerPool) -> torch.Tensor:
        """Rank 0's part of a parallel step: ``scheduled`` in contiguous micro-batches balanced by tokens
        (``parallel/micro_batches.py``), each prepared on its own; their logits in the scheduler's order."""
        group = workers.group
        assert group is not None, "the pool joined its group before the runner was built"
        parts = micro_batches.count(
            workers.micro_batches, group.pp_size, len(scheduled), backend=group.backend
        )
        runs = micro_batches.split([item.num_new_tokens for item in scheduled], parts)
        steps = [self._step(scheduled[run.start : run.stop]) for run in runs]
        stage = partial(micro_batches.run_stage, self.model, group.traffic, logits_last=True)
        return workers.run_step(steps, stage)

    def _step(self, scheduled: list[ScheduledSeq]) -> StepInputs:
        """``scheduled``'s forward inputs; the sampled rows in ``scheduled``'s order."""
        # decodes first (stable), so they are rows [0, num_decodes) of the flat batch
        order = sorted(range(len(scheduled)), key=lambda i: not _is_decode(scheduled[i]))
        input_ids, positions, meta, sample_rows = self._prepare([scheduled[i] for i in order])
        return StepInputs(input_ids, positions, meta, self._sample_index(order, sample_rows))

    def _sample_index(self, order: list[int], sample_rows: dict[int, range]) -> torch.Tensor:
        """The flat batch's rows to sample from, in the scheduler's order (``order[j]`` is the
        scheduled position of the batch's j-th sequence)."""
        rows_by_original = {order[j]: rows for j, rows in sample_rows.items()}
        wanted = [r for i in range(len(order)) for r in rows_by_original.get(i, ())]
        return torch.tensor(wanted, dtype=torch.long, device=self.device)

    def _prepare(
        self, batch: list[ScheduledSeq]
    ) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, dict[int, range]]:
        token_ids: list[int] = []
        positions: list[int] = []
        sample_rows: dict[int, range] = {}
        for j, item in enumerate(batch):
            seq, n = item.seq, item.num_new_tokens
            start_pos = seq.num_computed_tokens
            token_ids.extend(seq.token_ids[start_pos : start_pos + n - len(item.spec_token_ids)])
            token_ids.extend(item.spec_token_ids)
            positions.extend(range(start_pos, start_pos + n))
            if item.is_last_chunk:
                sample_rows[j] = range(len(token_ids) - item.num_sample_rows, len(token_ids))
        tables = [item.seq.block_table for item in batch]
        if self.has_two_groups:  # each group's own slots and tables
            meta = self._view(*self._group_inputs(batch, tables), None)
            sliding_tables = [item.seq.sliding_blocks.block_table for item in batch]
            meta.sliding_view = self._view(*self._group_inputs(batch, sliding_tables), self.sliding_window)
        elif self.is_mixed:
            inputs = self._group_inputs(batch, tables)
            meta = self._view(*inputs, None)
            meta.sliding_view = self._view(*inputs, self.sliding_window)
        else:
            window = None if self.has_full_layers else self.sliding_window
            meta = self._view(*self._group_inputs(batch, tables), window)
        return (
            torch.tensor(token_ids, dtype=torch.long, device=self.device),
            torch.tensor(positions, dtype=torch.long, device=self.device),
            meta,
            sample_rows,
        )

    def _group_inputs(
        self, batch: list[ScheduledSeq], tables: list[list[int]]
    ) -> tuple[torch.Tensor, list[tuple[list[int], int]], list[_Prefill]]:
        """The slot mapping, decodes and prefill chunks of the step through one KV group's ``tables``."""
        bs = self.block_size
        slots: list[int] = []
        decodes: list[tuple[list[int], int]] = []
        prefills: list[_Prefill] = []
        for item, table in zip(batch, tables, strict=True):
            start_pos, n, start_row = item.seq.num_computed_tokens, item.num_new_tokens, len(slots)
            slots.extend(table[pos // bs] * bs + pos % bs for pos in range(start_pos, start_pos + n))
            if _is_decode(item):
                decodes.append((table, start_pos + 1))
            else:  # later chunks and prefix hits read their context through the table
                context = self._slots_of(table, start_pos + n) if start_pos else None
                prefills.append(_Prefill(start_row, start_row + n, start_pos, context))
        return torch.tensor(slots, dtype=torch.long, device=self.device), decodes, prefills

    def _view(
        self,
        slot_mapping: torch.Tensor,
        decodes: list[tuple[list[int], int]],
        prefills: list[_Prefill],
        window: int | None,
    ) -> AttentionMetadata:
        """The step as layers with ``window`` (None: full attention) see it."""
        bs, to = self.block_size, self.device
        meta = AttentionMetadata(slot_mapping=slot_mapping, block_size=bs, sliding_window=window)
        if decodes:
            tables: list[list[int]] = []
            lens: list[int] = []
            for table, num_tokens in decodes:
                # a window cuts whole blocks that are out of reach; lens count from the first block kept
                first = _first_key(num_tokens - 1, window) // bs
                tables.append(table[first:] if first else table)
                lens.append(num_tokens - first * bs)
            meta.num_decode_tokens = len(lens)
            meta.decode_blocks = self._decode_blocks(tables, lens)
            meta.decode_lens = torch.tensor(lens, dtype=torch.int32, device=to)
        for p in prefills:
            chunk = PrefillChunk(p.start, p.end, p.num_context, None)
            total = p.num_context + (p.end - p.start)
            if p.context_slots is not None:  # keys from the window's first, through the table
                first_key = _first_key(p.num_context, window)
                chunk.context_slots = p.context_slots[first_key:]
                chunk.mask = _causal_mask(p.num_context, total, first_key, window, to)
            elif window is not None and total > window:  # a fresh chunk longer than the window
                chunk.mask = _causal_mask(0, total, 0, window, to)
            meta.prefills.append(chunk)
        return meta

    def _slots_of(self, table: list[int], num_tokens: int) -> torch.Tensor:
        blocks = torch.tensor(
            table[: -(-num_tokens // self.block_size)], dtype=torch.long, device=self.device
        )
        offsets = torch.arange(self.block_size, device=self.device)
        return (blocks.unsqueeze(1) * self.block_size + offsets).flatten()[:num_tokens]

    def _decode_blocks(self, tables: list[list[int]], lens: list[int]) -> torch.Tensor:
        """Block ids [num_decodes, max_blocks], short tables padded with their own first block so every
        padded slot is valid memory (the torch path gathers whole blocks, 16 slots at a time)."""
        max_blocks = -(-max(lens) // self.block_size)
        padded = [t[:max_blocks] + [t[0]] * (max_blocks - min(len(t), max_blocks)) for t in tables]
        return torch.tensor(padded, dtype=torch.long, device=self.device)


@dataclass(frozen=True, slots=True)
class _Prefill:
    """One prefill chunk's rows ``[start, end)`` of the flat batch, and the slots of all its keys (context
    and chunk) when it has context."""

    start: int
    end: int
    num_context: int
    context_slots: torch.Tensor | None


def _first_key(position: int, window: int | None) -> int:
    """The first key position a query at ``position`` may attend to."""
    return 0 if window is None else max(0, position - window + 1)


def _causal_mask(
    first_query: int, end: int, first_key: int, window: int | None, device: torch.device
) -> torch.Tensor:
    """[queries, keys] bool for query positions [first_query, end) over key positions [first_key, end):
    causal, and within the window as transformers masks it (a key at q - window or earlier is out)."""
    key_pos = torch.arange(first_key, end, device=device).unsqueeze(0)
    query_pos = torch.arange(first_query, end, device=device).unsqueeze(1)
    mask = key_pos <= query_pos
    if window is not None:
        mask &= query_pos - key_pos < window
    return mask


def _is_decode(item: ScheduledSeq) -> bool:
    """One new token after some context: a decode, or a one-token prefill chunk (same attention shape)."""
    return item.num_new_tokens == 1 and item.seq.num_computed_tokens > 0
