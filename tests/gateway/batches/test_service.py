"""The batch service checks an uploaded or batched file in a worker thread, so the event loop goes on
serving other requests while a large file is read, and a bad line still fails the call."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from gateway.batches import service as service_module
from gateway.batches.service import BatchService
from gateway.batches.state import MemoryBatchState
from gateway.errors import InvalidRequest
from gateway.policy.batches import BatchesConfig
from tests.gateway.batches.conftest import batch_file


def test_files_are_read_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[threading.Thread] = []
    read = service_module.read_batch_file

    def recording(data: bytes, **limits: Any) -> Any:
        threads.append(threading.current_thread())
        with pytest.raises(RuntimeError):
            asyncio.get_running_loop()  # no loop runs in this thread
        return read(data, **limits)

    monkeypatch.setattr(service_module, "read_batch_file", recording)
    service, config = BatchService(MemoryBatchState(), tmp_path), BatchesConfig(files_dir=str(tmp_path))

    async def both() -> None:
        uploaded = await service.upload("acme", "b.jsonl", "batch", batch_file(3), config)
        body = {"input_file_id": uploaded.id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
        batch = await service.create("acme", None, body, config)
        assert batch.total == 3
        with pytest.raises(InvalidRequest, match="Line 1"):
            await service.upload("acme", "bad.jsonl", "batch", b"{not json\n", config)

    asyncio.run(both())
    assert len(threads) == 3 and threading.main_thread() not in threads
