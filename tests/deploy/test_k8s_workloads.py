"""The workloads of deploy/k8s, in every overlay: each runs the real program (its CLI's flags, its
probes on real routes, the variables it reads), locked down and sized, and shuts down within the
drain (each overlay as a whole: test_k8s_overlays.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from backends.server import parse_args as engine_args
from gateway.cli.parser import _parser as gateway_parser
from gateway.settings import Settings
from loadtests.config import ENV_PREFIX as LOADTEST_ENV_PREFIX
from loadtests.config import LoadTestConfig
from tests.support.k8s import (
    OVERLAYS,
    ROOT,
    Rendered,
    containers,
    env_of,
    flag,
    pod_spec,
    rendered,
)

PRESTOP_MARGIN_S = 5
"""The gateway's wait for after-response work past the drain (docs/operations.md), plus nothing more."""


@pytest.fixture(params=OVERLAYS)
def r(request: pytest.FixtureRequest) -> Rendered:
    return rendered(request.param)


def test_gateway_runs_the_real_cli_with_probes_on_its_routes(r: Rendered) -> None:
    gateway = r.one("Deployment", "sortyard-gateway")
    c = pod_spec(gateway)["containers"][0]
    assert c["image"].startswith("sortyard/gateway:")  # the tag comes from the overlay
    args, rest = gateway_parser().parse_known_args(c["args"])
    assert c["command"] == ["sortyard"] and args.command == "serve" and rest == []
    assert args.workers == 1  # one worker a pod: the resources below are sized for one
    routes = (ROOT / "gateway" / "routes.py").read_text()
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz"), ("startupProbe", None)):
        get = c[probe]["httpGet"]
        assert path is None or get["path"] == path
        assert f'@get("{get["path"]}")' in routes, get["path"]
        assert get["port"] == "http"
    port = {p["name"]: p["containerPort"] for p in c["ports"]}["http"]
    assert args.port == port and args.host == "0.0.0.0"
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec(gateway)["volumes"]}
    # the policy and the keys overlay are whole directories (never subPath): kubelet swaps their files
    assert Path(args.policy).parent == Path(mounts["policy"]["mountPath"])
    assert Path(args.overlay).parent == Path(mounts["keys"]["mountPath"])
    assert volumes["policy"]["configMap"]["name"] == "sortyard-policy"
    assert Path(args.policy).name in r.one("ConfigMap", "sortyard-policy")["data"]
    assert volumes["keys"]["secret"]["secretName"].startswith("sortyard-keys")
    assert not any("subPath" in m for m in c["volumeMounts"])


def test_engine_runs_the_real_server_with_probes_on_its_routes(r: Rendered) -> None:
    engine = r.one("StatefulSet", "sortyard-engine")
    c = pod_spec(engine)["containers"][0]
    assert c["command"] == ["python3", "-m", "backends.server"]
    args = engine_args(c["args"])
    app = (ROOT / "backends" / "serving" / "app.py").read_text()
    assert c["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert f'@get("{c[probe]["httpGet"]["path"]}")' in app
    assert args.port == {p["name"]: p["containerPort"] for p in c["ports"]}["http"]
    assert args.host == "0.0.0.0"
    is_gpu = "nvidia.com/gpu" in c["resources"]["limits"]
    assert is_gpu == (r.overlay == "production")
    # the CUDA build on GPUs (deploy/docker/engine-cuda.Dockerfile), the CPU one elsewhere
    assert c["image"].startswith("sortyard/engine-cuda:" if is_gpu else "sortyard/engine:")
    if is_gpu:
        assert args.device == "cuda" and c["resources"]["requests"]["nvidia.com/gpu"] == "1"
    else:
        assert args.kv_cache_bytes is not None  # on CPU, else a share of the node's memory


def test_every_container_is_locked_down_and_sized(r: Rendered) -> None:
    for workload in r.workloads():
        where = f"{r.overlay}: {workload['kind']} {workload['metadata']['name']}"
        pod = pod_spec(workload)
        assert pod["automountServiceAccountToken"] is False, where
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["securityContext"]["runAsUser"] >= 10000, where
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", where
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for c in containers(workload):
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"], where
            assert sc["seccompProfile"]["type"] == "RuntimeDefault", where
            for bound in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][bound]), (where, bound)
            # what a read-only root leaves writable: only the volumes, /tmp and the caches among them
            mounted = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
            for name in ("TMPDIR", "HOME", "XDG_CACHE_HOME", "SORTYARD_CACHE_DIR", "HF_HOME"):
                value = env_of(c).get(name, {}).get("value")
                if value is not None:
                    assert any(value == p or value.startswith(p + "/") for p in mounted), (where, name)
            for path, name in mounted.items():
                if path in ("/tmp", "/var/cache/sortyard", "/cache", "/data", "/dev/shm"):
                    assert "emptyDir" in volumes[name], (where, path)


def test_gateway_resources_follow_the_benchmarks(r: Rendered) -> None:
    """One worker: about one core and ~100 MiB RSS (docs/benchmarks.md): request a core, limit two;
    request 256 MiB, limit 512 MiB."""
    c = r.container("Deployment", "sortyard-gateway")
    assert c["resources"]["requests"] == {"cpu": "1", "memory": "256Mi"}
    assert c["resources"]["limits"] == {"cpu": "2", "memory": "512Mi"}


def test_shutdown_outlasts_the_drain_and_updates_never_drop_capacity(r: Rendered) -> None:
    gateway = r.one("Deployment", "sortyard-gateway")
    c = pod_spec(gateway)["containers"][0]
    env = env_of(c)
    drain_s = float(env["SORTYARD_DRAIN_TIMEOUT_S"]["value"]) if "SORTYARD_DRAIN_TIMEOUT_S" in env else 0
    drain_s = drain_s or Settings().drain_timeout_s
    prestop_s = c["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert prestop_s >= 3  # long enough for the endpoint removal to reach kube-proxy and ingresses
    assert pod_spec(gateway)["terminationGracePeriodSeconds"] > prestop_s + drain_s + PRESTOP_MARGIN_S
    update = gateway["spec"]["strategy"]["rollingUpdate"]
    assert update["maxUnavailable"] == 0 and update["maxSurge"] >= 1
    spread = pod_spec(gateway)["topologySpreadConstraints"]
    assert {s["topologyKey"] for s in spread} == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
    assert pod_spec(gateway)["affinity"]["podAntiAffinity"]


def test_env_names_are_read_by_the_programs(r: Rendered) -> None:
    gateway = r.container("Deployment", "sortyard-gateway")
    policy = r.policy()
    settings = {f"SORTYARD_{f.name.upper()}" for f in dataclasses.fields(Settings)}
    named_by_policy = {policy.store.url_env, policy.cache.affinity.salt_secret_env}
    named_by_policy |= {
        rep.api_key_env for p in policy.pools.values() for rep in p.replicas if rep.api_key_env
    }
    env = env_of(gateway)
    assert set(env) <= settings | named_by_policy | {"TMPDIR"}, set(env) - settings - named_by_policy
    for name in ("SORTYARD_REDIS_URL", "SORTYARD_CACHE_SALT_SECRET"):
        assert name in named_by_policy and "secretKeyRef" in env[name]["valueFrom"], name
    loadtest = {LOADTEST_ENV_PREFIX + f.name.upper() for f in dataclasses.fields(LoadTestConfig)}
    for name in ("sortyard-locust-master", "sortyard-locust-worker"):
        if name in r.kind("Deployment"):
            assert set(env_of(r.container("Deployment", name))) <= loadtest | {"HOME"}


def test_locust_master_and_workers_aim_at_the_gateway() -> None:
    r = rendered("loadtest")
    master = r.container("Deployment", "sortyard-locust-master")
    worker = r.container("Deployment", "sortyard-locust-worker")
    assert (ROOT / flag(master["args"], "-f")).is_file() and flag(worker["args"], "-f") == flag(
        master["args"], "-f"
    )
    assert "--master" in master["args"] and "--worker" in worker["args"]
    host = urlsplit(flag(master["args"], "--host"))
    gateway = r.one("Service", "sortyard-gateway")
    assert host.hostname == "sortyard-gateway" and host.port == gateway["spec"]["ports"][0]["port"]
    master_service = r.one("Service", flag(worker["args"], "--master-host"))
    ports = {p["name"]: p["port"] for p in master_service["spec"]["ports"]}
    assert int(flag(worker["args"], "--master-port")) == ports["master"] == 5557
