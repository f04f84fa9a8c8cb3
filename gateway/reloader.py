"""Hot reload of the policy: on file change (polled) and on SIGHUP.

Each policy is compiled once (``gateway.compiled``) when it loads. A new file that fails validation
or compilation is refused and logged; the last good policy keeps serving. Each adopted policy is
pushed to the listeners (the balancer, ...) before requests see it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from gateway.compiled import CompiledPolicy, compile_policy
from gateway.policy import Policy, PolicyError, load_policy

logger = logging.getLogger("sortyard.policy")

Listener = Callable[[CompiledPolicy], None]


class PolicyReloader:
    """Holds the serving policy and replaces it when its files change."""

    def __init__(
        self,
        path: str | Path,
        *,
        overlay: str | Path | None = None,
        poll_interval_s: float = 1.0,
        policy: Policy | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.path = Path(path)
        self.overlay = Path(overlay) if overlay else None
        self.poll_interval_s = poll_interval_s
        self.environ: Mapping[str, str] = dict(os.environ if environ is None else environ)
        """The process environment the policy compiles against (its ``SORTYARD_*`` overrides)."""
        self.compiled = compile_policy(policy or load_policy(self.path, self.overlay), self.environ)
        self.loaded_at = time.time()
        """Unix time the serving policy was adopted (the first load, or the last reload)."""
        self.listeners: list[Listener] = []
        self.refusal_listeners: list[Callable[[str], None]] = []
        """Called with the error of each refused reload (the audit trail records it)."""
        self.num_reloads = 0
        self.num_refused = 0
        self.last_error: str | None = None
        self._stamp = self._file_stamp()
        self._task: asyncio.Task[None] | None = None

    @property
    def policy(self) -> Policy:
        """The serving policy, as written."""
        return self.compiled.policy

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener`` with the current policy now and with every policy adopted later."""
        self.listeners.append(listener)
        listener(self.compiled)

    def _file_stamp(self) -> tuple[tuple[int, int, int], ...]:
        stamps = []
        for path in (self.path, self.overlay):
            try:
                st = os.stat(path) if path else None
                stamps.append((st.st_mtime_ns, st.st_size, st.st_ino) if st else (0, 0, 0))
            except FileNotFoundError:
                stamps.append((0, 0, 0))
        return tuple(stamps)

    def reload(self) -> bool:
        """Load the files again; adopt the result if valid. True when a new policy was adopted."""
        self._stamp = self._file_stamp()
        try:
            compiled = compile_policy(load_policy(self.path, self.overlay), self.environ)
        except Exception as e:  # anything else is a bug, but it must not end the watcher
            if not isinstance(e, PolicyError):
                logger.exception("policy reload failed unexpectedly")
                e = PolicyError(f"{self.path}: could not be loaded: {type(e).__name__}: {e}")
            self.num_refused += 1
            self.last_error = str(e)
            logger.error("policy reload refused, the last good policy keeps serving: %s", e)
            for listener in self.refusal_listeners:
                listener(str(e))
            return False
        self.adopt(compiled)
        logger.info("policy reloaded from %s", self.path)
        return True

    def adopt(self, compiled: CompiledPolicy) -> None:
        """Serve ``compiled`` from now on: the listeners first, then new requests."""
        for listener in self.listeners:
            listener(compiled)
        self.compiled = compiled
        self.loaded_at = time.time()
        self.num_reloads += 1
        self.last_error = None

    async def _watch(self) -> None:
        seen = self._stamp
        while True:
            await asyncio.sleep(self.poll_interval_s)
            stamp = self._file_stamp()
            # reload once a change has held still for one interval: a file caught mid-write
            # (truncated, half written) is never parsed and refused
            if stamp != self._stamp and stamp == seen:
                self.reload()
            seen = stamp

    def start(self) -> None:
        """Start polling the files and listen for SIGHUP (where the loop supports signals)."""
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._watch())
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGHUP, self.reload)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
