"""The gateway and engine images: a chat request through the gateway container reaches the engine
container (one user-defined network), answered through the official ``openai`` SDK."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gateway.keys.hashing import key_stanza
from tests.deploy.conftest import ROOT, Images, build_image, free_port, http_status, run, wait_until

pytestmark = pytest.mark.slow

POLICY = ROOT / "deploy" / "docker" / "policy" / "policy.yaml"
API_KEY = "sk-deploy-test-images"
READY_TIMEOUT_S = 180


def write_policy_dir(directory: Path, keys_yaml: str) -> Path:
    """deploy/docker/policy/policy.yaml plus a local.yaml overlay with ``keys_yaml``, readable by the
    containers' non-root user."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "policy.yaml").write_text(POLICY.read_text())
    (directory / "local.yaml").write_text(keys_yaml)
    directory.chmod(0o755)
    for path in directory.iterdir():
        path.chmod(0o644)
    return directory


def start_ready(url: str, args: list[str]) -> float:
    """``docker run -d ARGS``, then seconds until ``url`` answers 200 (start-to-ready)."""
    started = time.monotonic()
    run(["docker", "run", "-d", *args])
    assert wait_until(lambda: http_status(url) == 200, READY_TIMEOUT_S), f"{url} not ready"
    return time.monotonic() - started


@pytest.fixture
def network() -> Iterator[str]:
    name = f"sy-test-{uuid.uuid4().hex[:8]}"
    run(["docker", "network", "create", name])
    try:
        yield name
    finally:
        containers = run(["docker", "ps", "-aq", "--filter", f"network={name}"], check=False).stdout.split()
        if containers:
            run(["docker", "rm", "-f", *containers], timeout_s=60, check=False)
        run(["docker", "network", "rm", name], check=False)


def test_chat_through_gateway_image_to_engine_image(
    images: Images, network: str, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    from openai import OpenAI

    policy_dir = write_policy_dir(tmp_path / "policy", "keys:\n" + key_stanza(API_KEY, "deploy-test") + "\n")
    engine_port, gateway_port = free_port(), free_port()
    engine_s = start_ready(
        f"http://127.0.0.1:{engine_port}/ready",
        ["--init", "--network", network, "--network-alias", "engine", "--name", f"{network}-engine",
         "-p", f"127.0.0.1:{engine_port}:8100", images.engine,
         "--model", "smollm2-135m", "--num-threads", "2"],
    )  # fmt: skip
    gateway_s = start_ready(
        f"http://127.0.0.1:{gateway_port}/healthz",
        ["--init", "--network", network, "--name", f"{network}-gateway",
         "-p", f"127.0.0.1:{gateway_port}:8000", "-v", f"{policy_dir}:/etc/sortyard:ro", images.gateway],
    )  # fmt: skip
    record_property("engine_start_to_ready_s", round(engine_s, 2))
    record_property("gateway_start_to_ready_s", round(gateway_s, 2))
    print(f"start-to-ready: engine {engine_s:.2f} s, gateway {gateway_s:.2f} s")

    client = OpenAI(base_url=f"http://127.0.0.1:{gateway_port}/v1", api_key=API_KEY, timeout=120)
    completion = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        temperature=0,
        max_tokens=12,
    )
    answer = completion.choices[0].message.content or ""
    assert "Paris" in answer, answer
    assert completion.usage is not None and completion.usage.completion_tokens > 0


def test_loadtest_image_runs_the_locustfile(images: Images) -> None:
    """The image the compose file's and the manifests' Locust master and workers run: Locust finds the
    user classes of loadtests/locustfile.py (the file imports, its scenarios load)."""
    tag = "sortyard/loadtest:0.1.0"
    build_image("loadtest.Dockerfile", tag, {"BASE_IMAGE": images.base})
    listed = run(["docker", "run", "--rm", tag, "-f", "loadtests/locustfile.py", "--list"], timeout_s=120)
    assert "ChatUser" in listed.stdout, listed.stdout + listed.stderr
