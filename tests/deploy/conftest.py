"""A Docker engine and the deploy images for tests/deploy (slow tests).

The session reuses a running engine; else, as root with apt, it installs Debian's docker.io (and
debootstrap, docker-compose), starts ``dockerd`` itself and stops it at the end. Images build from
``local/debian:bookworm`` (deploy/docker/base-image.sh, made once: Docker keeps it) unless
``SORTYARD_DOCKER_BASE_IMAGE`` names another base; Docker's layer cache makes rebuilds cheap.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKER_DIR = ROOT / "deploy" / "docker"
LOCAL_BASE = "local/debian:bookworm"
TORCH_WHEEL = Path("/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl")
APT_TIMEOUT_S = 300
BASE_IMAGE_TIMEOUT_S = 600
BUILD_TIMEOUT_S = 1200
IMAGES_TIMEOUT_S = APT_TIMEOUT_S + BASE_IMAGE_TIMEOUT_S + 3 * BUILD_TIMEOUT_S + 300
"""The pytest timeout of a test that needs the images: the first one builds them in its setup (on a
cold machine, minutes), each step bounded by its own timeout above; the suite's 300 s would cut it."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "images" in getattr(item, "fixturenames", ()) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(IMAGES_TIMEOUT_S))


@dataclass(frozen=True, slots=True)
class Images:
    """The tags of the images this session built."""

    gateway: str
    engine: str
    redis: str
    base: str


def run(args: Sequence[str], timeout_s: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    """A command's result, its output captured; a failure raises with that output."""
    result = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout_s, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def is_docker_up() -> bool:
    if shutil.which("docker") is None:
        return False
    return run(["docker", "info"], timeout_s=20, check=False).returncode == 0


def wait_until(predicate: Callable[[], bool], timeout_s: float, interval_s: float = 0.2) -> bool:
    """Poll ``predicate()`` until it is true (True) or ``timeout_s`` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return False


def http_status(url: str) -> int | None:
    """The status ``url`` answers with, None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _apt_install(packages: list[str]) -> str | None:
    """Install Debian packages; None on success, else why not."""
    if not packages:
        return None
    if os.geteuid() != 0:
        return f"not root: cannot install {' '.join(packages)}"
    if shutil.which("apt-get") is None:
        return f"no apt-get to install {' '.join(packages)}"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        for args in (
            ["apt-get", "update", "-q"],
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
        ):
            result = subprocess.run(args, capture_output=True, text=True, timeout=APT_TIMEOUT_S, env=env)
            if result.returncode != 0:
                return f"{' '.join(args)} failed: {result.stderr[-500:]}"
    except subprocess.TimeoutExpired:
        return f"apt-get did not finish within {APT_TIMEOUT_S} s"
    return None


@pytest.fixture(scope="session")
def docker_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A Docker engine the docker CLI reaches: a running one, or dockerd started here (and stopped)."""
    tools = {"docker.io": "dockerd", "debootstrap": "debootstrap", "docker-compose": "docker-compose"}
    missing = [package for package, binary in tools.items() if shutil.which(binary) is None]
    if is_docker_up():
        reason = _apt_install([p for p in missing if p != "docker.io"]) if missing else None
        if reason:
            pytest.skip(f"Docker is up but its tools are missing: {reason}")
        yield
        return
    if os.geteuid() != 0:
        pytest.skip("no running Docker engine, and not root: cannot start dockerd")
    reason = _apt_install(missing)
    if reason:
        pytest.skip(f"no running Docker engine and cannot install one: {reason}")
    log = (tmp_path_factory.mktemp("dockerd") / "dockerd.log").open("w")
    daemon = subprocess.Popen(["dockerd", "--storage-driver=overlay2"], stdout=log, stderr=subprocess.STDOUT)
    try:
        if not wait_until(lambda: daemon.poll() is not None or is_docker_up(), 60) or not is_docker_up():
            pytest.skip(f"dockerd did not come up (exit {daemon.poll()}); see {log.name}")
        yield
    finally:
        daemon.terminate()  # by the PID this fixture started
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
        log.close()


def _image_exists(tag: str) -> bool:
    return run(["docker", "image", "inspect", tag], timeout_s=30, check=False).returncode == 0


def build_image(dockerfile: str, tag: str, args: dict[str, str]) -> None:
    build_args = [item for name, value in args.items() for item in ("--build-arg", f"{name}={value}")]
    run(
        ["docker", "build", "--network", "host", "-q", "-f", f"deploy/docker/{dockerfile}", "-t", tag,
         *build_args, str(ROOT)],
        timeout_s=BUILD_TIMEOUT_S,
    )  # fmt: skip


@pytest.fixture(scope="session")
def images(docker_engine: None) -> Iterator[Images]:
    """The gateway, engine and redis images, built (from cached layers after the first time)."""
    base = os.environ.get("SORTYARD_DOCKER_BASE_IMAGE", LOCAL_BASE)
    if base == LOCAL_BASE and not _image_exists(LOCAL_BASE):
        run(["sh", str(DOCKER_DIR / "base-image.sh"), LOCAL_BASE], timeout_s=BASE_IMAGE_TIMEOUT_S)
    built = Images("sortyard/gateway:0.1.0", "sortyard/engine:0.1.0", "sortyard/redis:7.0", base)
    build_image("gateway.Dockerfile", built.gateway, {"BASE_IMAGE": base})
    build_image("redis.Dockerfile", built.redis, {"BASE_IMAGE": base})
    engine_args = {"BASE_IMAGE": base}
    copied: Path | None = None
    if TORCH_WHEEL.exists():  # offline: the CPU wheel on disk, else the PyTorch CPU index
        target = DOCKER_DIR / "wheels" / TORCH_WHEEL.name
        if not target.exists():
            shutil.copyfile(TORCH_WHEEL, target)
            copied = target
        engine_args["TORCH_WHEEL"] = TORCH_WHEEL.name
    try:
        build_image("engine.Dockerfile", built.engine, engine_args)
    finally:
        if copied is not None:  # out of the other images' build context
            copied.unlink()
    yield built
