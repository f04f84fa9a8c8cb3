"""Run an ASGI app under a real uvicorn server on a free loopback port, in a background thread, and talk
to it: raw posts and the OpenAI error shape."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn

from tests.backends.serving.fake_engine import MODEL


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(app: Any, *, ready_timeout_s: float = 30.0) -> Iterator[str]:
    """Yield the base URL (``http://127.0.0.1:PORT``) while uvicorn serves ``app``."""
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + ready_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def wait_until(predicate: Any, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return bool(predicate())


def post(base_url: str, path: str, body: object, **kwargs: object) -> httpx.Response:
    """POST ``body`` (JSON-encoded unless bytes or str) as application/json."""
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    headers = {"content-type": "application/json", **kwargs.pop("headers", {})}  # type: ignore[dict-item]
    return httpx.post(f"{base_url}{path}", content=content, headers=headers, timeout=20)


def assert_error(
    response: httpx.Response, status: int, code: str | None = None, param: str | None = None
) -> None:
    """``response`` is an OpenAI-shaped refusal with this status (and code and param, when given)."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] and error["code"]  # every refusal names its reason
    if code is not None:
        assert error["code"] == code
    if param is not None:
        assert error["param"] == param


def chat(**fields: object) -> dict[str, object]:
    """A one-message chat body for the contract tests' model, with ``fields`` on top."""
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **fields}
