"""Learned classifier: the shipped model, the cost/quality knob, and refusal of bad model files."""

from __future__ import annotations

import hashlib
import struct
import subprocess
import sys
from pathlib import Path

import msgspec
import numpy as np
import pytest

from gateway.routing import ClassifierLoadError, ClassifyInput, LearnedConfig, build_classifier
from gateway.routing.learned import (
    FORMAT_VERSION,
    MAGIC,
    LearnedModel,
    ModelPayload,
    decode_model,
    encode_model,
)

POOLS = ["small", "medium", "large"]


def user(text: str) -> ClassifyInput:
    return ClassifyInput(messages=[{"role": "user", "content": text}])


@pytest.mark.parametrize(
    ("text", "pool"),
    [
        ("hey, good morning!", "small"),
        ("Translate 'see you tomorrow' into Spanish.", "small"),
        ("Write a Python function that validates an IBAN, with tests.", "medium"),
        ("Explain how public-key cryptography works.", "medium"),
        ("Prove that every finite group of order p^2 is abelian.", "large"),
        (
            "Design a multi-region payments system with exactly-once settlement and analyse failure modes.",
            "large",
        ),
    ],
)
def test_shipped_model_routes_obvious_prompts(text: str, pool: str) -> None:
    decision = build_classifier(LearnedConfig(), pools=POOLS).classify(user(text))
    assert decision.pool == pool, decision
    assert decision.reason.startswith(f"learned p({pool})=")
    assert decision.probabilities is not None
    assert set(decision.probabilities) == set(POOLS)
    assert sum(decision.probabilities.values()) == pytest.approx(1.0, abs=1e-3)


def test_shipped_model_metadata() -> None:
    model = LearnedModel.load()
    assert model.tiers == POOLS
    assert model.metrics["holdout_accuracy"] >= 0.75
    assert model.metrics["num_holdout"] >= 100


def test_cost_quality_knob_moves_decisions() -> None:
    text = "Explain how a hash map handles collisions."
    assert build_classifier(LearnedConfig(cost_quality=0.0), pools=POOLS).classify(user(text)).pool == "small"
    assert build_classifier(LearnedConfig(cost_quality=1.0), pools=POOLS).classify(user(text)).pool == "large"
    # Per-tier override: large only when p(large) >= 0.99.
    strict = build_classifier(LearnedConfig(thresholds={"large": 0.99}), pools=POOLS)
    assert strict.classify(user("Prove that sqrt(2) is irrational.")).pool in ("medium", "large")


def test_monotone_in_cost_quality() -> None:
    prompts = ["hi", "Summarize the causes of World War I.", "Prove the fundamental theorem of arithmetic."]
    rank = {p: i for i, p in enumerate(POOLS)}
    for prompt in prompts:
        tiers = [
            rank[build_classifier(LearnedConfig(cost_quality=q), pools=POOLS).classify(user(prompt)).pool]
            for q in (0.0, 0.25, 0.5, 0.75, 1.0)
        ]
        assert tiers == sorted(tiers), (prompt, tiers)


def test_empty_prompt_falls_back() -> None:
    decision = build_classifier(LearnedConfig(fallback_pool="medium"), pools=POOLS).classify(
        ClassifyInput(messages=[])
    )
    assert (decision.pool, decision.reason) == ("medium", "learned empty-prompt fallback")


def test_bad_threshold_tier_is_refused() -> None:
    with pytest.raises(ClassifierLoadError, match="thresholds"):
        build_classifier(LearnedConfig(thresholds={"small": 0.5}), pools=POOLS)


def test_missing_model_file_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "nope.bin"
    with pytest.raises(ClassifierLoadError, match=r"does not exist; train one with `switchyard router train"):
        build_classifier(LearnedConfig(path=str(missing)), pools=POOLS)


def _corrupt(blob: bytes, how: str) -> bytes:
    if how == "empty":
        return b""
    if how == "magic":
        return b"PK\x03\x04" + blob[4:]
    if how == "truncated":
        return blob[: len(blob) // 2]
    if how == "bitflip":
        return blob[:-10] + bytes([blob[-10] ^ 0x01]) + blob[-9:]
    if how == "version":
        return blob[:8] + struct.pack(">H", 99) + blob[10:]
    raise AssertionError(how)


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("empty", "shorter than the header"),
        ("magic", "not a Switchyard router model"),
        ("truncated", "truncated"),
        ("bitflip", "checksum mismatch"),
        ("version", "format version 99"),
    ],
)
def test_corrupt_model_file_is_refused(
    tmp_path: Path, shipped_model_bytes: bytes, how: str, message: str
) -> None:
    path = tmp_path / "router.bin"
    path.write_bytes(_corrupt(shipped_model_bytes, how))
    with pytest.raises(ClassifierLoadError, match=message):
        build_classifier(LearnedConfig(path=str(path)), pools=POOLS)


def test_well_formed_but_incompatible_payloads_are_refused(shipped_model_bytes: bytes) -> None:
    payload = decode_model(shipped_model_bytes)
    arrays = dict(payload.arrays)
    arrays["w2"] = msgspec.structs.replace(arrays["w2"], shape=[1, 1], data=b"\0\0\0\0")
    cases = [
        (msgspec.structs.replace(payload, arrays=arrays), "shapes"),
        (msgspec.structs.replace(payload, arrays={}), "missing"),
        (msgspec.structs.replace(payload, temperature=0.0), "temperature"),
        (msgspec.structs.replace(payload, dense_names=["other"]), "dense features"),
        (
            msgspec.structs.replace(payload, features=msgspec.structs.replace(payload.features, version=7)),
            "version",
        ),
    ]
    for bad, message in cases:
        with pytest.raises(ClassifierLoadError, match=message):
            LearnedModel(decode_model(encode_model(bad)))
    body = msgspec.msgpack.encode({"tiers": 5})  # a valid header over a payload of the wrong shape
    blob = struct.pack(">8sHHQ32s", MAGIC, FORMAT_VERSION, 0, len(body), hashlib.sha256(body).digest()) + body
    with pytest.raises(ClassifierLoadError, match="not decodable"):
        decode_model(blob)


def test_round_trip_is_exact(shipped_model_bytes: bytes) -> None:
    payload = decode_model(shipped_model_bytes)
    assert isinstance(payload, ModelPayload)
    assert decode_model(encode_model(payload)) == payload
    probs = LearnedModel(payload).predict("hello")
    assert probs.dtype == np.float32 and probs.shape == (3,)


def test_importing_the_gateway_side_never_imports_torch() -> None:
    code = (
        "import sys, gateway.routing, gateway.routing.learned, gateway.routing.examples,"
        " gateway.routing.rules, gateway.routing.explain;"
        "from gateway.routing import build_classifier, LearnedConfig, ClassifyInput;"
        "c = build_classifier(LearnedConfig());"
        "c.classify(ClassifyInput(messages=[{'role': 'user', 'content': 'hi'}]));"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_latency_is_bounded() -> None:
    """A loose bound for a shared CI box; bench/classify_latency.py measures the real p99."""
    import time

    classifier = build_classifier(LearnedConfig(), pools=POOLS)
    request = user(("Explain the trade-offs of eventual consistency in detail. " * 80)[:4500])
    for _ in range(20):
        classifier.classify(request)
    times = []
    for _ in range(200):
        t0 = time.perf_counter()
        classifier.classify(request)
        times.append(time.perf_counter() - t0)
    assert float(np.percentile(times, 50)) < 0.005
