"""Ranks 1..N-1 as processes, and the step RPC from rank 0 to them.

Rank 0 (the engine's process) starts one process per other rank (``torch.multiprocessing``'s spawn) and
keeps a pipe to each. The pipe carries start-up messages and, every step, the step's inputs: one
``StepInputs`` (token ids, positions, the attention metadata and the rows to sample) for each of its
micro-batches (``micro_batches.py``), pickled once and written to every worker before rank 0 starts its
own forward; the model's collectives then keep the ranks in step. A worker idles on its pipe, never in
a collective, so an idle engine never trips the collectives' timeout.

Failure: a worker that raises sends its traceback and exits; one that dies closes its sockets, and
rank 0's next collective with it fails at once (or after the group's timeout, whatever hangs). Rank 0
also watches every worker's process sentinel from a thread, so a death is noticed between steps too.
Either way the pool is lost for good: the failing step and every later one raise ``EngineDeadError``
naming the rank, and the remaining workers are stopped. A worker whose pipe closes (rank 0 is gone)
exits.

Messages are tuples: ("hello",) once a worker runs, ("loaded",) once its shard is built, ("plan", x)
with the KV cache plan, ("ready",) once its cache is allocated, ("step", [StepInputs, ...]), ("exit",),
("error", text).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import pickle
import signal
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

import numpy as np
import torch
import torch.multiprocessing as mp

from backends.engine.errors import EngineDeadError
from backends.engine.layers.attention import AttentionMetadata
from backends.engine.parallel.group import ParallelGroup, destroy_group

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 10.0
"""How long ``close`` waits for a worker to exit before it is killed."""


@dataclass
class StepInputs:
    """One step's (or micro-batch's) forward inputs, the same on every rank."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    meta: AttentionMetadata
    sample_index: torch.Tensor
    """The rows of the flat batch whose logits the step samples from, in the scheduler's order."""

    def encode(self) -> StepInputs:
        """These inputs for the pipe: every tensor (the metadata's, nested, included) as a numpy array,
        which pickles 15x faster than a tensor."""
        wire: StepInputs = _map_leaves(self, torch.Tensor, lambda t: t.detach().cpu().numpy())
        return wire

    def decode(self, device: torch.device) -> StepInputs:
        """``encode``'s inverse: the arrays back as tensors on ``device``."""
        step: StepInputs = _map_leaves(self, np.ndarray, lambda a: torch.from_numpy(a).to(device))
        return step


class WorkerPool:
    """The worker processes of one engine (ranks 1..N-1), their pipes, and whether any was lost."""

    def __init__(self, processes: Sequence[BaseProcess], conns: Sequence[Connection]) -> None:
        self.processes = list(processes)
        self.conns = list(conns)
        self.lost: str | None = None
        """Why the pool is unusable (a rank died or a step failed); None while every rank serves."""
        self.group: ParallelGroup | None = None
        """Rank 0's place among the ranks, once it joined them (``rank.start_ranks``)."""
        self.micro_batches = 1
        """``EngineConfig.pipeline_micro_batches`` (0: automatic), which rank 0's runner splits by."""
        self.num_steps = 0
        self.num_micro_batches = 0
        """Steps run, and the micro-batches they were split into (their mean shows the overlap)."""
        self._closing = False
        self._on_lost: list[Callable[[str], None]] = []
        self._lock = threading.Lock()
        self._watcher = threading.Thread(target=self._watch, name="parallel-ranks-watch", daemon=True)
        self._watcher.start()
        # a pool dropped without close (an engine that failed to start) still takes its workers along
        self._finalizer = weakref.finalize(self, _kill, self.processes)

    @classmethod
    def spawn(cls, target: Callable[..., None], args: Sequence[tuple[Any, ...]]) -> WorkerPool:
        """One process per entry of ``args`` (ranks 1, 2, ...): ``target(*args[i], conn)``, where conn
        is the worker's end of its pipe. Workers are daemons: they never outlive this process."""
        ctx = mp.get_context("spawn")
        processes, conns = [], []
        for rank, rank_args in enumerate(args, start=1):
            ours, theirs = ctx.Pipe(duplex=True)
            process = ctx.Process(target=target, args=(*rank_args, theirs), name=f"rank-{rank}", daemon=True)
            process.start()
            theirs.close()  # only the worker holds its end: its death reads as EOF here
            log.info("rank %d started: pid %d", rank, process.pid)
            processes.append(process)
            conns.append(ours)
        return cls(processes, conns)

    # -- start-up ------------------------------------------------------------------------------------
    def send_all(self, message: tuple[Any, ...]) -> None:
        """Write ``message`` to every worker (pickled once)."""
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        for conn in self.conns:
            conn.send_bytes(payload)

    def wait_for(self, kind: str, timeout_s: float) -> None:
        """Block until every worker has sent a ``kind`` message; EngineDeadError when one fails, dies
        or is still silent after ``timeout_s``."""
        pending = dict(enumerate(self.conns, start=1))
        deadline = time.monotonic() + timeout_s
        while pending:
            if self.lost is not None:
                raise EngineDeadError(self.lost)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._lose(f"ranks {sorted(pending)} sent no {kind!r} within {timeout_s:.0f} s")
                raise EngineDeadError(self.lost or "timed out")
            for ready in wait(list(pending.values()), timeout=min(remaining, 1.0)):
                rank = next(r for r, c in pending.items() if c is ready)
                message = _read(pending[rank])
                if message is None or message[0] == "error":
                    self._lose(self._describe(rank, message))
                    raise EngineDeadError(self.lost or "a rank failed")
                if message[0] == kind:
                    del pending[rank]

    # -- steps ---------------------------------------------------------------------------------------
    def run_step(
        self, steps: list[StepInputs], execute: Callable[[list[StepInputs]], torch.Tensor]
    ) -> torch.Tensor:
        """Send a step's micro-batches to every worker, then run rank 0's part (``execute``); any failure
        loses the pool (the ranks are out of step for good) and raises EngineDeadError naming the cause."""
        if self.lost is not None:
            raise EngineDeadError(self.lost)
        try:
            self.send_all(("step", [step.encode() for step in steps]))
            self.num_steps += 1
            self.num_micro_batches += len(steps)
            return execute(steps)
        except Exception as exc:
            self._lose(self._failure_of_step(exc))
            raise EngineDeadError(self.lost or str(exc)) from exc

    def on_lost(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(reason)`` once, from whichever thread notices, when the pool is lost."""
        with self._lock:
            if self.lost is None:
                self._on_lost.append(callback)
                return
        callback(self.lost)

    # -- shutdown ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop every worker (asked to exit, killed after ``STOP_TIMEOUT_S``) and leave the group;
        idempotent."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        for conn in self.conns:
            try:
                conn.send_bytes(pickle.dumps(("exit",)))
            except OSError:  # that worker is gone already
                pass
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process in self.processes:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                log.warning("rank process %s did not exit; killing it", process.name)
                process.kill()
                process.join(timeout=STOP_TIMEOUT_S)
        for conn in self.conns:
            conn.close()
        self._finalizer.detach()
        destroy_group()

    # -- losing the pool -----------------------------------------------------------------------------
    def _watch(self) -> None:
        """Wait on the workers' sentinels; the first to fire outside ``close`` loses the pool."""
        sentinels = {process.sentinel: rank for rank, process in enumerate(self.processes, start=1)}
        ready = wait(list(sentinels))
        if self._closing:
            return
        rank = sentinels[ready[0]]  # type: ignore[index]
        self._lose(self._describe(rank, _poll(self.conns[rank - 1])))

    def _lose(self, reason: str) -> None:
        with self._lock:
            if self.lost is not None or self._closing:
                return
            self.lost = reason
            callbacks, self._on_lost = self._on_lost, []
        log.error("tensor/pipeline-parallel engine lost: %s", reason)
        for process in self.processes:  # the survivors cannot go on without it: stop them now
            if process.is_alive():
                process.kill()
        for callback in callbacks:
            callback(reason)

    def _failure_of_step(self, exc: Exception) -> str:
        """The cause of a failed step: a worker's error or death when there was one, else rank 0's."""
        deadline = time.monotonic() + 1.0  # a crashing worker's message and exit follow in milliseconds
        while time.monotonic() < deadline:
            for rank, (process, conn) in enumerate(zip(self.processes, self.conns, strict=True), start=1):
                message = _poll(conn)
                if (message is not None and message[0] == "error") or not process.is_alive():
                    return self._describe(rank, message)
            time.sleep(0.02)
        # every rank alive: a collective timed out (a rank hangs) or rank 0's own part raised
        return f"a parallel step failed on rank 0 with every rank alive: {type(exc).__name__}: {exc}"

    def _describe(self, rank: int, message: tuple[Any, ...] | None) -> str:
        process = self.processes[rank - 1]
        if message is not None and message[0] == "error":
            return f"rank {rank} failed: {message[1]}"
        process.join(timeout=1.0)
        code = process.exitcode
        if code is None:
            return f"rank {rank} (pid {process.pid}) stopped answering"
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        return f"rank {rank} (pid {process.pid}) died ({how})"


def serve_steps(
    conn: Connection, execute: Callable[[list[StepInputs]], object], device: torch.device
) -> None:
    """A worker's loop: run each step (its micro-batches) rank 0 sends until it says exit or its pipe
    closes."""
    while True:
        message = _read(conn)
        if message is None or message[0] == "exit":
            return
        if message[0] == "step":
            execute([step.decode(device) for step in message[1]])


def send(conn: Connection, *message: Any) -> None:
    """A worker's message to rank 0."""
    conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


def receive(conn: Connection, kind: str) -> Any:
    """A worker's wait for rank 0's ``kind`` message; its payload. EOFError when rank 0 is gone or
    says exit first."""
    message = _read(conn)
    if message is None or message[0] != kind:
        raise EOFError(f"rank 0 went away before sending {kind!r}")
    return message[1] if len(message) > 1 else None


def report_failure(conn: Connection, rank: int) -> None:
    """From a worker's ``except``: send the traceback to rank 0 (best effort), then exit at once (its
    sockets close, so rank 0's collectives with it fail now rather than at their timeout)."""
    text = traceback.format_exc(limit=8)
    log.error("rank %d failed:\n%s", rank, text)
    try:
        send(conn, "error", text.strip().splitlines()[-1] + f"\n{text}")
    except OSError:
        pass
    os._exit(1)


def _kill(processes: list[BaseProcess]) -> None:
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join(timeout=STOP_TIMEOUT_S)


def _read(conn: Connection) -> tuple[Any, ...] | None:
    """The next message, or None when the other end is closed."""
    try:
        message: tuple[Any, ...] = pickle.loads(conn.recv_bytes())
    except (EOFError, OSError):
        return None
    return message


def _poll(conn: Connection) -> tuple[Any, ...] | None:
    """A message already waiting, else None."""
    try:
        return _read(conn) if conn.poll(0) else None
    except OSError:
        return None


def _map_leaves(value: Any, leaf: type, fn: Callable[[Any], Any]) -> Any:
    """``value`` with ``fn`` applied to every ``leaf`` in it: through dataclasses (copied, never changed
    in place), lists, tuples and dicts."""
    if isinstance(value, leaf):
        return fn(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        mapped = copy.copy(value)
        for field in dataclasses.fields(value):
            object.__setattr__(mapped, field.name, _map_leaves(getattr(value, field.name), leaf, fn))
        return mapped
    if isinstance(value, list | tuple):
        return type(value)(_map_leaves(v, leaf, fn) for v in value)
    if isinstance(value, dict):
        return {k: _map_leaves(v, leaf, fn) for k, v in value.items()}
    return value
