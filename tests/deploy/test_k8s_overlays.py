"""Each overlay of deploy/k8s as a whole: it renders with ``kubectl kustomize`` into one namespace, its
services, monitors, budgets and network policies select real pods, its policy points at its engines,
its secrets are generated (dev) or external (production), and checkov passes on it (slow: checkov is
installed once into a cache folder). What each workload runs: test_k8s_workloads.py."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from gateway.policy import parse_policy
from gateway.policy.loader import merge
from tests.support.k8s import (
    K8S,
    OVERLAYS,
    Rendered,
    containers,
    flag,
    matches,
    pod_spec,
    render,
    rendered,
    selected_workloads,
)

NAMESPACE = "sortyard"
CHECKOV_VERSION = "3.3.30"
"""The checkov the slow test installs into its own venv (never into the project's extras)."""


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
        path.write_text(render(overlay))
        command += ["-f", str(path)]
    env = {**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-4000:]
    assert "Failed checks: 0" in done.stdout and "Passed checks:" in done.stdout, done.stdout
