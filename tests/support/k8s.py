"""deploy/k8s rendered: each overlay's objects (``kubectl kustomize``) by kind and name, and the parts
of a workload that tests/deploy/test_k8s_workloads.py and test_k8s_overlays.py read."""

from __future__ import annotations

import dataclasses
import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.policy import Policy, parse_policy

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
OVERLAYS = sorted(p.parent.name for p in (K8S / "overlays").glob("*/kustomization.yaml"))
WORKLOADS = ("Deployment", "StatefulSet")

Obj = dict[str, Any]


@functools.cache
def render(overlay: str) -> str:
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
    return Rendered(overlay, [o for o in yaml.safe_load_all(render(overlay)) if o])


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
