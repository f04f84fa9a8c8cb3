"""deploy/compose.yaml's core (redis, two gateways, the engine): a request through either gateway is
answered, and a key's requests_per_minute holds across both gateways (one Redis)."""

from __future__ import annotations

import functools
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gateway.keys.hashing import key_stanza
from tests.deploy.conftest import ROOT, Images, free_port, http_status, run, wait_until
from tests.deploy.test_images import READY_TIMEOUT_S, write_policy_dir

pytestmark = pytest.mark.slow

COMPOSE_FILE = ROOT / "deploy" / "compose.yaml"
CORE = ["redis", "engine", "gateway-1", "gateway-2"]
KEY = "sk-deploy-compose"
LIMITED_KEY = "sk-deploy-compose-limited"
MAX_REQUESTS_PER_MINUTE = 4


@dataclass(frozen=True, slots=True)
class Core:
    gateway_urls: tuple[str, str]
    engine_url: str


def compose(env: dict[str, str], *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["docker-compose", "-f", str(COMPOSE_FILE), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
        check=False,
    )
    assert result.returncode == 0, f"docker-compose {' '.join(args)}:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture
def core(images: Images, tmp_path: Path) -> Iterator[Core]:
    keys = (
        "keys:\n"
        + key_stanza(KEY, "compose")
        + "\n"
        + key_stanza(LIMITED_KEY, "limited")
        + f"\n    limits: {{requests_per_minute: {MAX_REQUESTS_PER_MINUTE}}}\n"
    )
    ports = {name: free_port() for name in ("GATEWAY_1_PORT", "GATEWAY_2_PORT", "ENGINE_PORT")}
    env = {
        **os.environ,
        "COMPOSE_PROJECT_NAME": f"sytest{uuid.uuid4().hex[:8]}",
        "SORTYARD_POLICY_DIR": str(write_policy_dir(tmp_path / "policy", keys)),
        "GATEWAY_IMAGE": images.gateway,
        "ENGINE_IMAGE": images.engine,
        "REDIS_IMAGE": images.redis,
        **{name: str(port) for name, port in ports.items()},
    }
    try:
        compose(env, "up", "-d", "--no-build", *CORE)
        urls = (f"http://127.0.0.1:{ports['GATEWAY_1_PORT']}", f"http://127.0.0.1:{ports['GATEWAY_2_PORT']}")
        engine_url = f"http://127.0.0.1:{ports['ENGINE_PORT']}"
        for url in (*(f"{u}/healthz" for u in urls), f"{engine_url}/ready"):
            assert wait_until(functools.partial(is_ok, url), READY_TIMEOUT_S), url
        yield Core(urls, engine_url)
    finally:
        compose(env, "down", "-v", "--remove-orphans", timeout_s=120)
        run(["docker", "ps", "-a"], check=False)


def is_ok(url: str) -> bool:
    return http_status(url) == 200


def chat(base_url: str, key: str) -> httpx.Response:
    return httpx.post(
        f"{base_url}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}"},
        json={
            "model": "gpt-4o-mini",
            "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "temperature": 0,
            "max_tokens": 8,
        },
        timeout=120,
    )


def test_compose_core_serves_and_shares_limits(core: Core) -> None:
    for url in core.gateway_urls:  # either gateway answers
        response = chat(url, KEY)
        assert response.status_code == 200, response.text
        assert "Paris" in response.json()["choices"][0]["message"]["content"]

    # the limited key's requests alternate between the gateways: one Redis counts them all
    statuses = [
        chat(core.gateway_urls[i % 2], LIMITED_KEY).status_code for i in range(MAX_REQUESTS_PER_MINUTE + 1)
    ]
    assert statuses == [200] * MAX_REQUESTS_PER_MINUTE + [429], statuses
    refused = chat(core.gateway_urls[MAX_REQUESTS_PER_MINUTE % 2 - 1], LIMITED_KEY)
    assert refused.status_code == 429, refused.text  # the other gateway refuses it too
    assert refused.json()["error"]["code"] is not None
