"""Batch files as JSON lines: an upload checked line by line, and the output and error lines written.

An input line is ``{"custom_id", "method": "POST", "url", "body"}``: custom_ids unique, one url in a
file (one of ``records.URLS``), the body a valid request for that url (``gateway.schemas``), never a
stream. The first bad line is a 400 whose message names it (``Line 3: ...``). An output line is
OpenAI's ``{"id": "batch_req_...", "custom_id", "response": {"status_code", "request_id", "body"},
"error"}``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.batches.records import URLS, LineResult, new_id
from gateway.errors import BodyTooLarge, GatewayError, InvalidRequest
from gateway.pipeline import Endpoint
from gateway.schemas import parse_body

__all__ = ["BatchLine", "ParsedFile", "error_line", "output_line", "read_batch_file"]

ENDPOINTS = {
    "/v1/chat/completions": Endpoint.CHAT,
    "/v1/completions": Endpoint.COMPLETIONS,
    "/v1/embeddings": Endpoint.EMBEDDINGS,
    "/v1/responses": Endpoint.RESPONSES,
}
"""A batch url -> the pipeline's endpoint (the same paths ``gateway.proxy`` serves)."""
MAX_CUSTOM_ID_CHARS = 512


class BatchLine(msgspec.Struct, frozen=True, array_like=True):
    """One request of a batch as the runner gets it: its custom_id and its body (raw JSON)."""

    custom_id: str
    body: msgspec.Raw


class ParsedFile(msgspec.Struct, frozen=True):
    """A checked batch file: its one url and its lines in order."""

    url: str
    lines: list[BatchLine]


class _InputLine(msgspec.Struct):
    custom_id: Any = None
    method: Any = None
    url: Any = None
    body: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))


_decode_line = msgspec.json.Decoder(_InputLine).decode


def _bad(number: int, message: str) -> InvalidRequest:
    return InvalidRequest(f"Line {number}: {message}", param="file", code="invalid_batch_line")


def read_batch_file(data: bytes, *, max_lines: int, max_bytes: int) -> ParsedFile:
    """The file's requests; InvalidRequest (400) naming the first bad line; BodyTooLarge (413)."""
    if len(data) > max_bytes:
        raise BodyTooLarge(f"The file is over the limit of {max_bytes} bytes.")
    url: str | None = None
    first_url_line = 0
    seen: dict[str, int] = {}
    lines: list[BatchLine] = []
    for number, text in enumerate(data.split(b"\n"), start=1):
        if not text.strip():
            continue  # blank lines (the last newline) carry no request
        if len(lines) >= max_lines:
            raise _bad(number, f"the file has more than {max_lines} requests (the policy's bound).")
        try:
            line = _decode_line(text)
        except msgspec.DecodeError as error:
            raise _bad(number, f"not a JSON object ({error}).") from None
        custom_id = line.custom_id
        if not isinstance(custom_id, str) or not custom_id or len(custom_id) > MAX_CUSTOM_ID_CHARS:
            raise _bad(number, f"custom_id must be a string of 1 to {MAX_CUSTOM_ID_CHARS} characters.")
        if custom_id in seen:
            raise _bad(number, f"custom_id '{custom_id}' is already on line {seen[custom_id]}.")
        seen[custom_id] = number
        if line.method != "POST":
            raise _bad(number, "method must be POST.")
        if line.url not in URLS:
            raise _bad(number, f"url must be one of {', '.join(URLS)}.")
        if url is None:
            url, first_url_line = line.url, number
        elif line.url != url:
            raise _bad(number, f"url {line.url} differs from line {first_url_line}'s {url}: one url a file.")
        _check_body(number, line.url, line.body)
        lines.append(BatchLine(custom_id, line.body))
    if url is None:
        raise InvalidRequest("The file has no requests.", param="file", code="invalid_batch_file")
    return ParsedFile(url, lines)


def _check_body(number: int, url: str, body: msgspec.Raw) -> None:
    raw = bytes(body)
    if not raw.lstrip().startswith(b"{"):
        raise _bad(number, "body must be a JSON object (the request).")
    try:
        decoded, _ = parse_body(ENDPOINTS[url], raw)
    except GatewayError as error:
        raise _bad(number, f"body: {error.message}") from None
    if decoded.get("stream"):
        raise _bad(number, "body: stream is not supported in a batch.")


_encode = msgspec.json.encode


def output_line(custom_id: str, result: LineResult) -> bytes:
    """The line of an answered request (the output file for a 2xx, the error file otherwise)."""
    response = {"status_code": result.status_code, "request_id": result.request_id, "body": result.body}
    return _encode({"id": new_id("batch_req_"), "custom_id": custom_id, "response": response, "error": None})


def error_line(custom_id: str, code: str, message: str) -> bytes:
    """The error-file line of a request that never ran (``batch_expired``, ``batch_cancelled``)."""
    error = {"code": code, "message": message}
    return _encode({"id": new_id("batch_req_"), "custom_id": custom_id, "response": None, "error": error})
