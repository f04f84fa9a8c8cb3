"""A batch file checked line by line: each refusal names its line; output lines in OpenAI's shape."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from gateway.batches.jsonl import error_line, output_line, read_batch_file
from gateway.batches.records import LineResult
from gateway.errors import BodyTooLarge, InvalidRequest

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def line(custom_id: str = "a", *, url: str = "/v1/chat/completions", body: Any = None, **extra: Any) -> bytes:
    document = {"custom_id": custom_id, "method": "POST", "url": url, "body": CHAT if body is None else body}
    return json.dumps({**document, **extra}).encode()


def read(*lines: bytes, max_lines: int = 100) -> Any:
    return read_batch_file(b"\n".join(lines) + b"\n", max_lines=max_lines, max_bytes=1_000_000)


def test_a_good_file() -> None:
    parsed = read(line("a"), b"", line("b"))
    assert parsed.url == "/v1/chat/completions"
    assert [each.custom_id for each in parsed.lines] == ["a", "b"]
    assert json.loads(bytes(parsed.lines[0].body)) == CHAT  # the body as it came


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (b"{not json", "Line 2: not a JSON object"),
        (b"[1, 2]", "Line 2: not a JSON object"),
        (line(""), "Line 2: custom_id must be a string"),
        (line("a"), "Line 2: custom_id 'a' is already on line 1"),
        (line("b", method="GET"), "Line 2: method must be POST"),
        (line("b", url="/v1/images"), "Line 2: url must be one of"),
        (
            line("b", url="/v1/embeddings", body={"model": "m", "input": "x"}),
            "Line 2: url /v1/embeddings differs",
        ),
        (line("b", body=[1]), "Line 2: body must be a JSON object"),
        (line("b", body={"model": "m"}), "Line 2: body: Missing required parameter: 'messages'"),
        (line("b", body={**CHAT, "stream": True}), "Line 2: body: stream is not supported"),
    ],
)
def test_a_bad_line_is_named(bad: bytes, message: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        read(line("a"), bad)
    assert caught.value.message.startswith(message), caught.value.message
    assert caught.value.status == 400 and caught.value.param == "file"


def test_bounds() -> None:
    with pytest.raises(InvalidRequest, match="Line 3: the file has more than 2 requests"):
        read(line("a"), line("b"), line("c"), max_lines=2)
    with pytest.raises(BodyTooLarge):
        read_batch_file(line("a") * 10, max_lines=100, max_bytes=10)
    with pytest.raises(InvalidRequest, match="no requests"):
        read(b"", b"  ")


def test_output_lines() -> None:
    result = LineResult("req-1", 200, msgspec.Raw(b'{"ok": true}'))
    written = json.loads(output_line("a", result))
    assert written["id"].startswith("batch_req_") and written["custom_id"] == "a" and written["error"] is None
    assert written["response"] == {"status_code": 200, "request_id": "req-1", "body": {"ok": True}}
    expired = json.loads(error_line("b", "batch_expired", "too late"))
    assert expired["response"] is None and expired["error"] == {
        "code": "batch_expired",
        "message": "too late",
    }
