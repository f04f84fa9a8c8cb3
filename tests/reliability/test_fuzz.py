"""Property-based fuzzing (hypothesis) of the two parsers that read foreign bytes: the SSE relay
(what an upstream streams) and the policy loader (what an operator writes).

CI runs a bounded, derandomized number of examples (seconds); ``SORTYARD_FUZZ_EXAMPLES=20000`` runs
a longer, random campaign locally.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.policy import Policy, PolicyError, parse_policy
from gateway.sse import SSERelay, model_rewriter

REPO = Path(__file__).resolve().parents[2]
_LONG = os.environ.get("SORTYARD_FUZZ_EXAMPLES")
FUZZ = settings(
    max_examples=int(_LONG) if _LONG else 300,
    derandomize=not _LONG,  # CI: the same examples every run; a finding is a bug, never a flake
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# ---- the SSE relay -------------------------------------------------------------------------------

_json_leaf = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
_json = st.recursive(
    _json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
_chunk = st.fixed_dictionaries(
    {
        "id": st.just("c1"),
        "model": st.sampled_from(["served-model", "other"]),
        "choices": st.lists(
            st.fixed_dictionaries(
                {
                    "index": st.integers(0, 3),
                    "delta": st.fixed_dictionaries({"content": st.text(max_size=30)}),
                    "finish_reason": st.none() | st.sampled_from(["stop", "length"]),
                }
            ),
            max_size=2,
        ),
    },
    optional={
        "usage": st.fixed_dictionaries(
            {"prompt_tokens": st.integers(0, 10**6), "completion_tokens": st.integers(0, 10**6)}
        ),
        "extra": _json,
    },
)


def _events(chunks: list[dict[str, Any]], done: bool) -> bytes:
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks)
    return body + (b"data: [DONE]\n\n" if done else b"")


def _relay_all(stream: bytes, cuts: list[int]) -> tuple[bytes, SSERelay]:
    relay = SSERelay(model_rewriter("served-model", "asked"), drop_usage_chunk=False)
    out, start = [], 0
    for cut in [*sorted({c % (len(stream) + 1) for c in cuts}), len(stream)]:
        out.append(relay.feed(stream[start:cut]))
        start = cut
    return b"".join(out), relay


@FUZZ
@given(st.binary(max_size=2048), st.lists(st.integers(0, 4096), max_size=8))
def test_any_bytes_never_raise_and_never_depend_on_how_they_were_split(
    stream: bytes, cuts: list[int]
) -> None:
    whole, one = _relay_all(stream, [])
    split, other = _relay_all(stream, cuts)
    assert whole == split
    assert (one.usage, one.finish_reasons, one.is_done, one.num_events) == (
        other.usage,
        other.finish_reasons,
        other.is_done,
        other.num_events,
    )
    assert (one.failure is None) == (other.failure is None)


@FUZZ
@given(st.lists(_chunk, max_size=6), st.booleans(), st.lists(st.integers(0, 4096), max_size=8), st.booleans())
def test_well_formed_streams_pass_through_event_by_event(
    chunks: list[dict[str, Any]], done: bool, cuts: list[int], crlf: bool
) -> None:
    stream = _events(chunks, done)
    if crlf:
        stream = stream.replace(b"\n", b"\r\n")
    out, relay = _relay_all(stream, cuts)
    assert relay.failure is None and relay.is_done == done
    assert relay.num_events == len(chunks)
    relayed = [e for e in out.split(b"\n\n") if e and e != b"data: [DONE]"]
    assert [json.loads(e[len(b"data: ") :]) for e in relayed] == [
        json.loads(json.dumps(c).replace('"served-model"', '"asked"')) for c in chunks
    ]
    with_usage = [c["usage"] for c in chunks if "usage" in c]
    if with_usage:
        assert relay.usage is not None
        assert (relay.usage.input_tokens, relay.usage.output_tokens) == (
            with_usage[-1]["prompt_tokens"],
            with_usage[-1]["completion_tokens"],
        )
    finishes = [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch["finish_reason"]]
    assert relay.finish_reasons == finishes


# ---- the policy loader ---------------------------------------------------------------------------

_DEFAULT = yaml.safe_load((REPO / "policies" / "default.yaml").read_text())


def _parse(document: Any) -> Policy | None:
    """A Policy or a PolicyError: anything else (TypeError, KeyError, ...) fails the property."""
    try:
        return parse_policy(document, "fuzz.yaml")
    except PolicyError as e:
        assert str(e).startswith("fuzz.yaml")
        return None


@FUZZ
@given(_json)
def test_any_document_is_a_policy_or_a_policy_error(document: Any) -> None:
    _parse(document)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _paths(value, (*prefix, i))
    return found


_DEFAULT_PATHS = _paths(_DEFAULT)[1:]


@FUZZ
@given(st.sampled_from(_DEFAULT_PATHS), _json)
def test_the_default_policy_with_any_one_value_changed_loads_or_is_refused(
    path: tuple[Any, ...], value: Any
) -> None:
    document = json.loads(json.dumps(_DEFAULT))
    node = document
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    _parse(document)
