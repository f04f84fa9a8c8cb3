"""What gets measured: nginx direct, the bare forwarder, and one or more gateway configurations.

Every target answers the same two endpoints (a plain chat completion and a 20-chunk SSE stream) and
owns the process whose RSS and CPU time the report shows.
"""

from __future__ import annotations

import json
import string
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .errors import BenchError, ProbeError
from .nginx import JSON_PATH, SSE_PATH, CannedUpstream
from .processes import ManagedProcess, ProcessSpec, free_port

HARNESS_DIR = Path(__file__).resolve().parent
REPO_ROOT = HARNESS_DIR.parent.parent
STANDIN_SCRIPT = HARNESS_DIR / "standin.py"
POLICY_TEMPLATE = HARNESS_DIR / "policy.yaml.tmpl"
CHAT_PATH = "/chat/completions"

JSON_MODEL = "bench"
SSE_MODEL = "bench-sse"
DIRECT_LABEL = "nginx direct"


@dataclass(frozen=True)
class GatewayConfig:
    """One gateway configuration to measure: a policy template and extra environment."""

    label: str
    """Row name in the report."""
    policy_template: Path
    """Policy YAML; ``${NGINX_PORT}``, ``${API_KEY_SHA256}`` and ``${REDIS_URL}`` are filled in first."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment for this gateway only (values are filled like the policy)."""


def parse_gateway_spec(spec: str) -> GatewayConfig:
    """``[LABEL=]POLICY[,KEY=VALUE...]``, e.g. ``keys=policies/bench_keys.yaml,SY_LOG_LEVEL=warning``."""
    head, *env_parts = spec.split(",")
    label, sep, path = head.partition("=")
    if not sep:
        label, path = "", head
    env: dict[str, str] = {}
    for part in env_parts:
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise BenchError(f"bad environment entry {part!r} in {spec!r}: expected KEY=VALUE")
        env[key] = value
    policy = Path(path)
    if not policy.is_file():
        raise BenchError(f"policy file not found: {policy}")
    return GatewayConfig(label or f"gateway ({policy.stem})", policy, env)


def fill(text: str, values: Mapping[str, str]) -> str:
    """``${NAME}`` placeholders replaced from ``values``; any other ``$`` is left as it is."""
    return string.Template(text).safe_substitute(values)


@dataclass
class Target:
    """One row of the report: two endpoints and the process that serves them."""

    label: str
    kind: str
    """``direct``, ``standin`` or ``gateway``."""
    base_url: str
    """Prefix of the JSON endpoint (``.../v1``); chat completions live at ``base_url + /chat/completions``."""
    sse_base_url: str
    process: ManagedProcess
    policy: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    startup_s: float = 0.0

    @property
    def json_url(self) -> str:
        return self.base_url + CHAT_PATH

    @property
    def sse_url(self) -> str:
        return self.sse_base_url + CHAT_PATH


def direct_target(upstream: CannedUpstream) -> Target:
    return Target(
        DIRECT_LABEL,
        "direct",
        upstream.base_url + JSON_PATH,
        upstream.base_url + SSE_PATH,
        upstream.process,
    )


def start_standin(upstream: CannedUpstream, cpus: str | None, work_dir: Path, timeout_s: float) -> Target:
    port = free_port()
    argv = (sys.executable, str(STANDIN_SCRIPT), "--upstream", upstream.base_url, "--port", str(port))
    process = ManagedProcess(ProcessSpec("standin", argv, cpus, work_dir))
    process.start()
    startup_s = process.wait_healthy(f"http://127.0.0.1:{port}/healthz", timeout_s)
    base = f"http://127.0.0.1:{port}/v1"
    return Target("bare forwarder", "standin", base, base, process, startup_s=startup_s)


def start_gateway(
    config: GatewayConfig,
    values: Mapping[str, str],
    *,
    index: int,
    cpus: str | None,
    work_dir: Path,
    num_workers: int,
    timeout_s: float,
    repo_root: Path = REPO_ROOT,
) -> Target:
    """``python -m gateway serve`` on a free port with the filled-in policy; waits for ``/healthz``.
    ``repo_root``: the tree whose ``gateway`` runs (another checkout, for an A/B of two commits)."""
    policy_path = work_dir / f"policy-{index}.yaml"
    policy_path.write_text(fill(config.policy_template.read_text(), values))
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "gateway",
        "serve",
        "--policy",
        str(policy_path),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    if num_workers > 1:
        argv += ["--workers", str(num_workers)]
    env = {key: fill(value, values) for key, value in config.env.items()}
    process = ManagedProcess(ProcessSpec(f"gateway-{index}", tuple(argv), cpus, work_dir, env, cwd=repo_root))
    process.start()
    startup_s = process.wait_healthy(f"http://127.0.0.1:{port}/healthz", timeout_s)
    base = f"http://127.0.0.1:{port}/v1"
    return Target(
        config.label,
        "gateway",
        base,
        base,
        process,
        policy=str(config.policy_template),
        env=env,
        startup_s=startup_s,
    )


def _post(url: str, body: bytes, api_key: str, accept_encoding: str = "") -> tuple[int, bytes, str | None]:
    """Status, body (as sent: urllib never decodes) and Content-Encoding of one POST."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    if accept_encoding:
        headers["Accept-Encoding"] = accept_encoding
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10.0) as resp:
            return resp.status, resp.read(), resp.headers.get("Content-Encoding")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers.get("Content-Encoding")
    except (urllib.error.URLError, OSError) as exc:
        raise ProbeError(f"POST {url} failed: {exc}") from exc


def probe(target: Target, api_key: str, accept_encoding: str = "") -> None:
    """One plain and one streamed request, checked for status and shape, before any load; with
    ``accept_encoding``, one more plain request that reports (on stderr) how it came back."""
    messages = [{"role": "user", "content": "Say hello in one short sentence."}]
    plain = json.dumps({"model": JSON_MODEL, "messages": messages, "max_tokens": 32}).encode()
    status, body, _ = _post(target.json_url, plain, api_key)
    if status != 200 or b'"chat.completion"' not in body:
        raise ProbeError(f"{target.label}: POST {target.json_url} answered {status}: {body[:500]!r}")
    if accept_encoding:
        status, encoded, coding = _post(target.json_url, plain, api_key, accept_encoding)
        if status != 200:
            raise ProbeError(f"{target.label}: POST {target.json_url} with Accept-Encoding answered {status}")
        print(
            f"  {target.label:<28} Accept-Encoding {accept_encoding!r}: Content-Encoding {coding or '-'}, "
            f"{len(encoded):,} of {len(body):,} bytes",
            file=sys.stderr,
            flush=True,
        )
    streamed = json.dumps(
        {"model": SSE_MODEL, "messages": messages, "max_tokens": 32, "stream": True}
    ).encode()
    status, body, _ = _post(target.sse_url, streamed, api_key, accept_encoding)
    num_chunks = body.count(b'"chat.completion.chunk"')
    if status != 200 or not body.rstrip().endswith(b"data: [DONE]") or num_chunks < 20:
        raise ProbeError(
            f"{target.label}: streamed POST {target.sse_url} answered {status} with "
            f"{num_chunks} chunks: {body[-500:]!r}"
        )
