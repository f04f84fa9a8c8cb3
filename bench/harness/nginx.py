"""The canned upstream: nginx on loopback answering a fixed chat completion and a fixed SSE stream.

nginx rather than a Python server, so that the upstream costs almost nothing next to the gateway
and its own speed never limits the figures.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .errors import StartError
from .native import KINDS, native_answers
from .processes import ManagedProcess, ProcessSpec, free_port

HARNESS_DIR = Path(__file__).resolve().parent
CONF_TEMPLATE = HARNESS_DIR / "nginx.conf.tmpl"
JSON_BODY = HARNESS_DIR / "chat_completion.json"
LONG_JSON_BODY = HARNESS_DIR / "chat_completion_long.json"
SSE_BODY = HARNESS_DIR / "chat_stream.sse"
JSON_BODIES = {"short": JSON_BODY, "long": LONG_JSON_BODY}
"""The plain answers by name: ``short`` (~340 bytes, a one-line reply) and ``long`` (~2.7 KB, a
512-token answer: over the gateway's 1 KiB compression threshold)."""

JSON_PATH = "/json/v1"
SSE_PATH = "/sse/v1"


# nginx refuses a config token over 4 KiB, so a longer body is set in pieces and joined by `return`.
_MAX_PIECE_CHARS = 2048


def _nginx_quoted(text: str) -> str:
    """``text`` as the inside of an nginx single-quoted string (literal newlines are allowed)."""
    if "$" in text:
        raise ValueError("nginx has no escape for '$' in a string with variables")
    return text.replace("\\", "\\\\").replace("'", "\\'")


def return_directives(name: str, body: str, indent: str = "            ") -> str:
    """``set`` + ``return 200`` directives answering ``body``, split into pieces nginx accepts."""
    pieces = [body[i : i + _MAX_PIECE_CHARS] for i in range(0, len(body), _MAX_PIECE_CHARS)] or [""]
    lines = [f"{indent}set ${name}_{i} '{_nginx_quoted(piece)}';" for i, piece in enumerate(pieces)]
    joined = "".join(f"${{{name}_{i}}}" for i in range(len(pieces)))
    lines.append(f'{indent}return 200 "{joined}";')
    return "\n".join(lines)


def kind_locations(json_body: Path = JSON_BODY) -> str:
    """A location per replica kind and answer (``/kinds/<kind>/json/``, ``/kinds/<kind>/sse/``): the
    canned answers in that kind's wire format (``harness/native.py``), at any path below."""
    blocks = []
    for kind in KINDS:
        for mode, (content_type, body) in zip(
            ("json", "sse"), native_answers(kind, json_body, SSE_BODY), strict=True
        ):
            directives = return_directives(f"{kind}_{mode}", body.strip() if mode == "json" else body)
            blocks.append(
                f"        location ^~ /kinds/{kind}/{mode}/ {{\n"
                f"            default_type {content_type.partition(';')[0]};\n"
                f"{directives}\n"
                "        }\n"
            )
    return "\n".join(blocks)


def render_nginx_conf(prefix: Path, port: int, json_body: Path = JSON_BODY) -> str:
    """The nginx.conf for a server on ``127.0.0.1:port`` keeping its pid and logs under ``prefix``,
    answering plain requests with ``json_body``."""
    values = {
        "PREFIX": str(prefix),
        "PORT": str(port),
        "JSON_RETURN": return_directives("json_body", json_body.read_text().strip()),
        "SSE_RETURN": return_directives("sse_body", SSE_BODY.read_text()),
        "KIND_LOCATIONS": kind_locations(json_body),
    }
    text = CONF_TEMPLATE.read_text()
    for name, value in values.items():
        text = text.replace("{{" + name + "}}", value)
    return text


def nginx_version(binary: str) -> str:
    out = subprocess.run([binary, "-v"], capture_output=True, text=True, check=False)
    return (out.stderr or out.stdout).strip().removeprefix("nginx version: ")


class CannedUpstream:
    """An nginx child process serving the canned bodies; ``base_url`` + JSON_PATH/SSE_PATH are the APIs."""

    def __init__(
        self, work_dir: Path, cpus: str | None, binary: str | None = None, json_body: Path = JSON_BODY
    ) -> None:
        found = (
            binary
            or shutil.which("nginx")
            or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
        )
        if found is None:
            raise StartError("nginx not found: apt-get install nginx")
        self.binary = found
        self.port = free_port()
        self.prefix = work_dir / "nginx"
        self.prefix.mkdir(parents=True, exist_ok=True)
        conf = self.prefix / "nginx.conf"
        conf.write_text(render_nginx_conf(self.prefix, self.port, json_body))
        argv = (
            self.binary,
            "-p",
            str(self.prefix),
            "-e",
            str(self.prefix / "error.log"),
            "-c",
            str(conf),
            "-g",
            "daemon off;",
        )
        self.process = ManagedProcess(ProcessSpec("nginx", argv, cpus, work_dir))

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 10.0) -> None:
        self.process.start()
        self.process.wait_healthy(f"{self.base_url}/healthz", timeout_s)

    def stop(self) -> None:
        self.process.stop()
