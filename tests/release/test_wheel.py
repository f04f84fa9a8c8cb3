"""The release as a user gets it: sdist and wheel built, checked, installed into a fresh venv outside
the tree, and ``sortyard serve`` answering the openai SDK in front of a fake upstream.

The venv takes the gateway's dependencies from the package registries (pip's cache makes a second run
quick) and never torch: ``pip install sortyard`` is the gateway alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import yaml

from tests.support.readiness import wait_until_ok
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.redis_server import free_port

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
RUNTIME_FILES = (
    "gateway/policy/default.yaml",  # the policy `sortyard serve` takes without --policy
    "gateway/tiers/data/router.bin",  # the tier classifier
    "gateway/console/static/index.html",
    "gateway/stores/lua/admit.lua",
    "backends/engine/kernels/paged_decode.c",  # the engine compiles it on first use
)


def _run(*argv: str | Path, cwd: Path, timeout_s: float = 600) -> str:
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    assert done.returncode == 0, (
        f"{argv} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sdist and wheel, as `python -m build` makes them for a release (the wheel built from the sdist)."""
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--outdir", out, REPO, cwd=out)
    return out


@pytest.fixture(scope="module")
def venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv, outside the tree, with the wheel installed (no extras)."""
    where = tmp_path_factory.mktemp("venv")
    _run(sys.executable, "-m", "venv", where / "venv", cwd=where)
    (wheel,) = dist.glob("sortyard-*.whl")
    _run(
        where / "venv/bin/python",
        "-m",
        "pip",
        "install",
        "-q",
        "--disable-pip-version-check",
        wheel,
        cwd=where,
    )
    return where / "venv"


def test_sdist_and_wheel_pass_twine_check(dist: Path) -> None:
    names = sorted(p.name for p in dist.iterdir())
    assert names == [f"sortyard-{VERSION}-py3-none-any.whl", f"sortyard-{VERSION}.tar.gz"]
    assert "PASSED" in _run(sys.executable, "-m", "twine", "check", "--strict", *dist.iterdir(), cwd=dist)


def test_the_wheel_carries_what_the_runtime_reads(dist: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        default_policy = archive.read("gateway/policy/default.yaml").decode()
    assert set(RUNTIME_FILES) <= names
    assert not any(name.startswith("tests/") for name in names)
    assert "pools:" in default_policy  # the file itself, not a link


def test_the_installed_gateway_has_no_torch_and_knows_its_version(venv: Path) -> None:
    assert _run(venv / "bin/sortyard", "--version", cwd=venv).strip() == f"sortyard {VERSION}"
    found = _run(
        venv / "bin/python", "-c", "import importlib.util as u; print(u.find_spec('torch'))", cwd=venv
    )
    assert found.strip() == "None"


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    yield fake
    fake.stop()


def test_sortyard_serve_answers_the_openai_sdk(venv: Path, upstream: FakeUpstream, tmp_path: Path) -> None:
    # the routing example, its replicas pointed at the fake upstream, with a key `sortyard keys new` made
    policy = yaml.safe_load((REPO / "policies/examples/routing.yaml").read_text())
    for pool in policy["pools"].values():
        for replica in pool["replicas"]:
            replica["base_url"] = upstream.base_url
    printed = _run(venv / "bin/sortyard", "keys", "new", "--tenant", "release", cwd=tmp_path)
    key = printed.split("store it now): ")[1].split()[0]
    policy["keys"] = yaml.safe_load(printed.split("in your policy:\n")[1])
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(policy))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SORTYARD_", "PYTHON", "VIRTUAL_ENV"))}
    server = subprocess.Popen(
        [
            venv / "bin/sortyard",
            "serve",
            "--policy",
            "policy.yaml",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=tmp_path,  # outside the tree: nothing can be imported from the clone
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until_ok(f"http://127.0.0.1:{port}/healthz", server)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="auto", messages=[{"role": "user", "content": "Prove the theorem."}]
        )
        reply = raw.parse()
        assert reply.choices[0].message.content and reply.usage is not None
        assert raw.headers["x-sortyard-pool"] == "large"  # the example's `maths` rule
        assert upstream.requests[-1]["model"] == "large-model"
    finally:
        server.terminate()
        _, stderr = server.communicate(timeout=30)
    assert server.returncode == 0, stderr.decode()[-3000:]
