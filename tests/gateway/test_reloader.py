"""Policy hot reload: file changes and SIGHUP; a bad file never replaces the serving policy."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import httpx
import pytest

from gateway.compiled import CompiledPolicy
from gateway.policy import load_policy
from gateway.reloader import PolicyReloader
from tests.support.gateway_process import GatewayProcess
from tests.support.gateway_server import fake_policy, write_policy


def test_reload_adopts_good_files_and_refuses_bad_ones(tmp_path: Path) -> None:
    path = write_policy(tmp_path / "p.yaml", fake_policy("http://127.0.0.1:1/v1"))
    reloader = PolicyReloader(path)
    seen: list[CompiledPolicy] = []
    reloader.subscribe(seen.append)
    first = reloader.policy
    path.write_text(path.read_text().replace("gpt-4o-mini", "gpt-new"))
    assert reloader.reload() and reloader.policy.pool_for_model("gpt-new") == "small"
    path.write_text("pools: [broken\n")
    assert not reloader.reload()
    assert reloader.policy.pool_for_model("gpt-new") == "small"
    assert "invalid YAML" in (reloader.last_error or "")
    assert len(seen) == 2 and seen[0].policy is first and reloader.num_refused == 1


@pytest.mark.slow
def test_sighup_reloads_a_running_gateway(tmp_path: Path) -> None:
    path = write_policy(tmp_path / "p.yaml", fake_policy("http://127.0.0.1:1/v1"))
    proc = GatewayProcess(path, env={"SWITCHYARD_RELOAD_INTERVAL_S": "3600"}).wait_ready()
    try:
        path.write_text(path.read_text().replace("gpt-4o-mini", "gpt-after-hup"))
        assert load_policy(path).pool_for_model("gpt-after-hup") == "small"
        proc.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        ids: list[str] = []
        while time.monotonic() < deadline:
            ids = [m["id"] for m in httpx.get(proc.url + "/v1/models").json()["data"]]
            if "gpt-after-hup" in ids:
                break
            time.sleep(0.1)
        assert "gpt-after-hup" in ids
    finally:
        proc.stop()
