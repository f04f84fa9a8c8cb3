"""`make run`'s command end to end: the real engine (SmolLM2 and Gemma 3 270M in one process) behind the
gateway, the openai SDK in front."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest
import yaml

from tools.servers.redis_server import free_port

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: ")
"""A line in the gateway's log format (gateway.cli.logs.LOG_FORMAT)."""


def test_gateway_run_with_the_local_engine(tmp_path: Path) -> None:
    engine_port, gateway_port = free_port(), free_port()
    document = yaml.safe_load((REPO / "policies" / "default.yaml").read_text())
    text = yaml.safe_dump(document).replace("127.0.0.1:8100", f"127.0.0.1:{engine_port}")
    policy = tmp_path / "default.yaml"
    policy.write_text(text)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "run", "--policy", str(policy), "--port", str(gateway_port)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 240
        exports: dict[str, str] = {}
        while time.monotonic() < deadline and len(exports) < 2:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if line.startswith("export OPENAI_"):
                name, _, value = line.removeprefix("export ").strip().partition("=")
                exports[name] = value
        assert len(exports) == 2, "".join(lines[-30:])
        num_at_start = len(lines)
        assert exports["OPENAI_BASE_URL"] == f"http://127.0.0.1:{gateway_port}/v1"
        key = exports["OPENAI_API_KEY"]
        assert key not in (tmp_path / "local.yaml").read_text()  # only its hash is written

        # the README's first snippet, as a new user pastes it after the two exports
        snippet = (REPO / "README.md").read_text().split("```python\n", 1)[1].split("```", 1)[0]
        ran = subprocess.run(
            [sys.executable, "-c", snippet],
            env={**os.environ, **exports},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert ran.returncode == 0 and "Paris" in ran.stdout, ran.stdout + ran.stderr

        client = openai.OpenAI(base_url=exports["OPENAI_BASE_URL"], api_key=key, max_retries=0, timeout=120)
        answer = client.chat.completions.create(
            model="gpt-4o-mini",
            temperature=0,
            max_tokens=16,
            messages=[{"role": "user", "content": "What is the capital of France?"}],
        )
        assert "Paris" in (answer.choices[0].message.content or "")
        assert answer.model == "gpt-4o-mini"
        streamed = "".join(
            c.choices[0].delta.content or ""
            for c in client.chat.completions.create(
                model="small",
                temperature=0,
                max_tokens=16,
                stream=True,
                messages=[{"role": "user", "content": "What is the capital of France?"}],
            )
            if c.choices
        )
        assert streamed == answer.choices[0].message.content
        assert (
            "Paris"
            in client.completions.create(
                model="small", prompt="The capital of France is", max_tokens=4, temperature=0
            )
            .choices[0]
            .text
        )
        routed = client.chat.completions.with_raw_response.create(
            model="auto", max_tokens=4, messages=[{"role": "user", "content": "hi!"}]
        )
        assert routed.headers["x-sortyard-pool"] in ("small", "medium", "large")
        assert routed.headers["x-sortyard-route-reason"].startswith("learned")
        # the second model of the one engine process: Gemma 3 270M (base) for completions
        gemma = client.completions.create(
            model="gemma3-270m",
            prompt="The capital of Germany is Berlin. The capital of France is",
            max_tokens=4,
            temperature=0,
        )
        assert gemma.model == "gemma3-270m" and "Paris" in gemma.choices[0].text
        assert {"small", "gemma3-270m"} <= {m.id for m in client.models.list().data}
        embedding = client.embeddings.create(model="text-embedding-3-small", input="hello")
        assert len(embedding.data[0].embedding) == 384
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(
                base_url=exports["OPENAI_BASE_URL"], api_key="sk-wrong", max_retries=0
            ).models.list()
    finally:
        proc.terminate()
        try:
            rest, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rest, _ = proc.communicate()
    lines += rest.splitlines(keepends=True)
    # a quiet terminal: the banner comes after every start-up line, every log line has the gateway's
    # format (the engine's and uvicorn's too), no access-log JSON (it went to a file), no progress bar
    chatter = lines[1 : num_at_start - 3] + lines[num_at_start:]  # lines[0]: "starting the reference engine"
    assert all(LOG_LINE.match(line) for line in chatter), "".join(chatter)
    assert not any(" WARNING " in line or "Loading weights" in line for line in chatter), "".join(chatter)
    assert any("engine ready" in line for line in lines[: num_at_start - 3])
    assert any("Uvicorn running on" in line for line in lines[: num_at_start - 3])
    assert lines[num_at_start - 3].startswith(f"Sortyard is ready on http://127.0.0.1:{gateway_port}")
    access_log = [json.loads(line) for line in (tmp_path / ".local" / "access.log").read_text().splitlines()]
    assert {"chat", "text_completion", "embeddings"} <= {entry["endpoint"] for entry in access_log}
