"""gateway/cli/serve.py: ``sortyard serve`` and its banner."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest
import yaml

from tests.gateway.cli.terminal import start_until_banner
from tools.servers.redis_server import free_port


@pytest.mark.parametrize("auth_required", [True, False])
def test_serve_names_a_key_only_when_any_key_works(tmp_path: Path, auth_required: bool) -> None:
    """``sortyard serve`` knows no key of an auth policy (only hashes): it says how to get one."""
    policy = tmp_path / "policy.yaml"
    replica = {"base_url": "http://127.0.0.1:9/v1", "model": "echo"}
    document = {
        "version": 1,
        "pools": {"small": {"replicas": [replica]}},
        "auth": {"required": auth_required},
    }
    policy.write_text(yaml.safe_dump(document))
    port = free_port()
    proc, lines = start_until_banner(["serve", "--policy", str(policy), "--port", str(port)], tmp_path)
    try:
        key_line = lines[-1]
        answer = httpx.get(
            f"http://127.0.0.1:{port}/v1/models", headers={"authorization": "Bearer sk-anything"}, timeout=10
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    if auth_required:
        assert answer.status_code == 401
        assert "sk-anything" not in key_line and "sortyard keys new" in key_line
    else:
        assert answer.status_code == 200 and key_line == "export OPENAI_API_KEY=sk-anything\n"
