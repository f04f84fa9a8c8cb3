"""The Kubernetes manifests in deploy/k8s: every overlay renders with ``kubectl kustomize`` and holds
together (probes on the real routes, real CLI flags and variables, ports, selectors, the policy), and
checkov passes on what it renders (slow: checkov is installed once into a cache folder)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from backends.server import parse_args as engine_args
from gateway.cli.parser import _parser as gateway_parser
from gateway.policy import Policy, parse_policy
from gateway.policy.loader import merge
from gateway.settings import Settings
from loadtests.config import ENV_PREFIX as LOADTEST_ENV_PREFIX
from loadtests.config import LoadTestConfig

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
OVERLAYS = sorted(p.parent.name for p in (K8S / "overlays").glob("*/kustomization.yaml"))
NAMESPACE = "sortyard"
WORKLOADS = ("Deployment", "StatefulSet")
CHECKOV_VERSION = "3.3.30"
"""The checkov the slow test installs into its own venv (never into the project's extras)."""
PRESTOP_MARGIN_S = 5
"""The gateway's wait for after-response work past the drain (docs/operations.md), plus nothing more."""

Obj = dict[str, Any]


@functools.cache
def _render(overlay: str) -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: `kubectl kustomize` renders the overlays")
    done = subprocess.run(
        [kubectl, "kustomize", str(K8S / "overlays" / overlay)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@dataclasses.dataclass
class Rendered:
    """One overlay's objects, by kind and name."""

    overlay: str
    objects: list[Obj]

    def kind(self, kind: str) -> dict[str, Obj]:
        return {o["metadata"]["name"]: o for o in self.objects if o["kind"] == kind}

    def one(self, kind: str, name: str) -> Obj:
        found = self.kind(kind)
        assert name in found, f"{self.overlay}: no {kind} {name}; has {sorted(found)}"
        return found[name]

    def workloads(self) -> list[Obj]:
        return [o for o in self.objects if o["kind"] in WORKLOADS]

    def container(self, kind: str, name: str) -> Obj:
        return pod_spec(self.one(kind, name))["containers"][0]

    def policy(self) -> Policy:
        text = self.one("ConfigMap", "sortyard-policy")["data"]["policy.yaml"]
        return parse_policy(yaml.safe_load(text), f"{self.overlay}: ConfigMap sortyard-policy")


def rendered(overlay: str) -> Rendered:
    return Rendered(overlay, [o for o in yaml.safe_load_all(_render(overlay)) if o])


def pod_spec(workload: Obj) -> Obj:
    spec: Obj = workload["spec"]["template"]["spec"]
    return spec


def containers(workload: Obj) -> list[Obj]:
    spec = pod_spec(workload)
    return [*spec.get("initContainers", []), *spec["containers"]]


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def selected_workloads(r: Rendered, selector: dict[str, str]) -> list[Obj]:
    return [w for w in r.workloads() if matches(selector, w["spec"]["template"]["metadata"]["labels"])]


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def env_of(container: Obj) -> dict[str, Obj]:
    return {e["name"]: e for e in container.get("env", [])}


@pytest.fixture(params=OVERLAYS)
def r(request: pytest.FixtureRequest) -> Rendered:
    return rendered(request.param)


def test_the_overlays_exist_and_render_into_one_namespace(r: Rendered) -> None:
    assert {"dev", "production", "loadtest"} <= set(OVERLAYS)
    kinds = {o["kind"] for o in r.objects}
    assert {"Namespace", "Deployment", "StatefulSet", "Service", "ConfigMap", "NetworkPolicy"} <= kinds
    for o in r.objects:
        if o["kind"] != "Namespace":
            assert o["metadata"].get("namespace") == NAMESPACE, (o["kind"], o["metadata"]["name"])


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


def test_the_policy_configmap_parses_and_points_at_the_engines(r: Rendered) -> None:
    policy = r.policy()
    services = r.kind("Service")
    statefulsets = {s["spec"]["serviceName"]: s for s in r.kind("StatefulSet").values()}
    used_pods: set[str] = set()
    for pool_name, pool in policy.pools.items():
        for replica in pool.replicas:
            url = urlsplit(replica.base_url)
            host, port = url.hostname or "", url.port
            where = f"{r.overlay}: pool {pool_name} -> {replica.base_url}"
            name, _, service_name = host.partition(".")
            if service_name:  # a StatefulSet pod through its headless Service: <sts>-<i>.<service>
                sts = statefulsets[service_name]
                prefix, _, index = name.rpartition("-")
                assert prefix == sts["metadata"]["name"] and int(index) < sts["spec"]["replicas"], where
                assert services[service_name]["spec"]["clusterIP"] == "None", where
                used_pods.add(name)
            else:
                service_name = host
            assert service_name in services, where
            assert port in [p["port"] for p in services[service_name]["spec"]["ports"]], where
    engine = r.one("StatefulSet", "sortyard-engine")
    assert used_pods == {f"sortyard-engine-{i}" for i in range(engine["spec"]["replicas"])}
    if r.overlay == "production":
        assert urlsplit(policy.pools["large"].replicas[0].base_url).hostname == "vllm"
        served = flag(r.container("Deployment", "vllm")["args"], "--served-model-name")
        assert policy.pools["large"].replicas[0].model == served


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


def test_services_monitors_budgets_and_policies_select_real_pods(r: Rendered) -> None:
    for workload in r.workloads():
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert matches(workload["spec"]["selector"]["matchLabels"], labels), workload["metadata"]["name"]
    for name, service in r.kind("Service").items():
        selected = selected_workloads(r, service["spec"]["selector"])
        assert len(selected) == 1, name
        port_names = {p["name"]: p["containerPort"] for c in containers(selected[0]) for p in c["ports"]}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in port_names, (name, port)
            assert port["port"] == port_names[port["targetPort"]], (name, port)
    for sts in r.kind("StatefulSet").values():
        assert r.one("Service", sts["spec"]["serviceName"])
    for name, monitor in r.kind("ServiceMonitor").items():
        found = [
            s
            for s in r.kind("Service").values()
            if matches(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])
        ]
        assert len(found) == 1, name
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= {
            p["name"] for p in found[0]["spec"]["ports"]
        }
        assert all(e["path"] == "/metrics" for e in monitor["spec"]["endpoints"])
    for kind in ("PodDisruptionBudget", "NetworkPolicy"):
        for name, obj in r.kind(kind).items():
            selector = obj["spec"]["selector" if kind == "PodDisruptionBudget" else "podSelector"][
                "matchLabels"
            ]
            assert len(selected_workloads(r, selector)) == 1, (kind, name)
    for workload in r.workloads():  # every pod is behind some NetworkPolicy
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert any(
            matches(n["spec"]["podSelector"]["matchLabels"], labels) for n in r.kind("NetworkPolicy").values()
        )
    for hpa in r.kind("HorizontalPodAutoscaler").values():
        ref = hpa["spec"]["scaleTargetRef"]
        assert r.one(ref["kind"], ref["name"])


def _secret_refs(r: Rendered) -> Iterator[tuple[str, str | None, bool]]:
    """(secret name, key or None for a whole-Secret volume, optional) for every reference."""
    for workload in r.workloads():
        for c in containers(workload):
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    yield ref["name"], ref["key"], bool(ref.get("optional"))
        for v in pod_spec(workload).get("volumes", []):
            if "secret" in v:
                yield v["secret"]["secretName"], None, bool(v["secret"].get("optional"))


def test_secrets_are_generated_in_dev_and_external_in_production(r: Rendered) -> None:
    secrets = r.kind("Secret")
    refs = [(name, key) for name, key, optional in _secret_refs(r) if not optional]
    if r.overlay == "production":
        # never committed: created with kubectl before the first apply (the overlay says how)
        assert not secrets
        assert {name for name, _ in refs} == {"sortyard-gateway-secrets", "sortyard-keys"}
        return
    for name, key in refs:
        assert name in secrets, name
        assert key is None or key in {**secrets[name].get("data", {}), **secrets[name].get("stringData", {})}


def test_dev_runs_one_of_each_with_an_in_cluster_redis_and_a_known_key() -> None:
    import base64

    r = rendered("dev")
    assert r.one("Deployment", "sortyard-gateway")["spec"]["replicas"] == 1
    assert r.one("StatefulSet", "sortyard-engine")["spec"]["replicas"] == 1
    assert not r.kind("HorizontalPodAutoscaler") and not r.kind("ServiceMonitor")
    secrets = r.kind("Secret")
    (gateway_secrets,) = [s for n, s in secrets.items() if n.startswith("sortyard-gateway-secrets")]
    url = urlsplit(base64.b64decode(gateway_secrets["data"]["redis-url"]).decode())
    redis = r.one("Service", "sortyard-redis")
    assert url.scheme == "redis" and url.hostname == "sortyard-redis"
    assert url.port == redis["spec"]["ports"][0]["port"]
    overlay = yaml.safe_load(base64.b64decode(secrets["sortyard-keys"]["data"]["local.yaml"]))
    policy = parse_policy(
        merge(yaml.safe_load(r.one("ConfigMap", "sortyard-policy")["data"]["policy.yaml"]), overlay), "dev"
    )
    assert policy.auth.required and len(policy.keys) == 1
    # the load test's key is the one whose hash the dev overlay holds
    lt = rendered("loadtest")
    (key_secret,) = [s for n, s in lt.kind("Secret").items() if n.startswith("sortyard-loadtest")]
    key = base64.b64decode(key_secret["data"]["key"])
    assert hashlib.sha256(key).hexdigest() == policy.keys[0].sha256


def test_production_scales_and_survives_disruptions() -> None:
    r = rendered("production")
    gateway = r.one("Deployment", "sortyard-gateway")
    assert "replicas" not in gateway["spec"]  # the HPA owns it; an apply would reset it otherwise
    hpa = r.one("HorizontalPodAutoscaler", "sortyard-gateway")
    assert hpa["spec"]["minReplicas"] >= 3 and hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"]
    (metric,) = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    assert r.one("PodDisruptionBudget", "sortyard-gateway")["spec"]["maxUnavailable"] == 1
    assert r.one("PodDisruptionBudget", "sortyard-engine")
    assert r.one("ServiceMonitor", "sortyard-gateway")["apiVersion"] == "monitoring.coreos.com/v1"
    assert r.one("StatefulSet", "sortyard-engine")["spec"]["replicas"] >= 2
    assert "sortyard-redis" not in r.kind("Deployment")  # Redis is external: a URL in a Secret
    vllm = r.container("Deployment", "vllm")
    assert vllm["image"].startswith("vllm/vllm-openai:") and "nvidia.com/gpu" in vllm["resources"]["limits"]
    for overlay in OVERLAYS:
        for image in (c["image"] for w in rendered(overlay).workloads() for c in containers(w)):
            assert ":" in image and not image.endswith(":latest"), (overlay, image)


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


def test_checkov_skips_each_carry_a_reason() -> None:
    skipped = yaml.safe_load((K8S / ".checkov.yaml").read_text())["skip-check"]
    text = (K8S / ".checkov.yaml").read_text()
    for check in skipped:  # a comment above each skipped check says why
        assert re.search(rf"#[^\n]+\n(#[^\n]*\n)*\s*- {check}\b", text), check
    for overlay in OVERLAYS:
        for o in rendered(overlay).objects:
            for key, value in o["metadata"].get("annotations", {}).items():
                if key.startswith("checkov.io/skip"):
                    check, _, reason = value.partition("=")
                    assert re.fullmatch(r"CKV2?_K8S_\d+", check) and len(reason) > 20, (overlay, key, value)


def _checkov() -> Path:
    """checkov in its own venv under the user's cache folder, installed on first use (~25 s); a stamp
    written after the install marks it complete, so an interrupted one is redone."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sortyard"
    venv = cache / "checkov-venv"
    stamp = venv / f"installed-checkov-{CHECKOV_VERSION}"
    if not stamp.exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"checkov=={CHECKOV_VERSION}"]
        done = subprocess.run(pip, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, f"pip install checkov=={CHECKOV_VERSION} failed:\n{done.stderr[-4000:]}"
        stamp.touch()
    return venv / "bin" / "checkov"


@pytest.mark.slow
def test_checkov_passes_on_every_overlay(tmp_path: Path) -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed: `kubectl kustomize` renders the overlays")
    checkov = _checkov()
    command = [str(checkov), "--framework", "kubernetes", "--compact", "--quiet"]
    command += ["--config-file", str(K8S / ".checkov.yaml")]
    for overlay in OVERLAYS:
        path = tmp_path / f"{overlay}.yaml"
        path.write_text(_render(overlay))
        command += ["-f", str(path)]
    env = {**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-4000:]
    assert "Failed checks: 0" in done.stdout and "Passed checks:" in done.stdout, done.stdout
