"""The error tree: every class renders OpenAI's shape, and the module's drawing of the tree is the tree."""

from __future__ import annotations

import json
import re

import gateway.errors as errors
from gateway.errors import (
    GatewayError,
    InvalidRequest,
    RateLimited,
    UpstreamStatusError,
    render,
    status_of,
)

_ROW = re.compile(r"^\s{4}(?P<indent>[|+\- ]*)(?P<name>[A-Za-z]+)\s+\((?P<what>[^)]*)")


def _drawn_tree() -> dict[str, tuple[str | None, str]]:
    """Class name -> (parent name, what the drawing says) from the module docstring."""
    doc = errors.__doc__ or ""
    drawn: dict[str, tuple[str | None, str]] = {}
    parents: list[str] = []
    for line in doc.split("::", 1)[1].splitlines():
        match = _ROW.match(line)
        if match is None:
            continue
        depth = len(match.group("indent")) // 4
        parents = parents[:depth]
        drawn[match.group("name")] = (parents[-1] if parents else None, match.group("what"))
        parents.append(match.group("name"))
    return drawn


def _error_classes() -> dict[str, type[GatewayError]]:
    return {
        name: value
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, GatewayError)
    }


def test_the_drawing_names_every_error_class_under_its_real_parent() -> None:
    drawn = _drawn_tree()
    classes = _error_classes()
    assert set(drawn) == set(classes)
    for name, (parent, what) in drawn.items():
        cls = classes[name]
        if parent is None:
            assert cls is GatewayError
        else:
            assert cls.__bases__ == (classes[parent],), name
        if cls is not UpstreamStatusError:  # its status is the upstream's
            assert what.startswith(f"{cls.status} {cls.default_code}"), (name, what)


def test_render_gives_openai_shape_status_and_headers() -> None:
    error = RateLimited("slow down", headers={"Retry-After": "3"})
    status, body, headers = render(error)
    assert status == 429 and headers == {"Retry-After": "3"}
    assert json.loads(body) == {
        "error": {"message": "slow down", "type": error.type, "param": None, "code": "rate_limit_exceeded"}
    }
    bad = InvalidRequest("no", param="model", code="invalid_value")
    assert json.loads(render(bad)[1])["error"]["param"] == "model"


def test_an_upstream_status_error_is_relayed_as_the_upstream_sent_it() -> None:
    error = UpstreamStatusError(422, b'{"error": {"message": "bad"}}', "the upstream refused")
    assert status_of(error) == 422
    assert render(error)[:2] == (422, b'{"error": {"message": "bad"}}')
