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

from gateway.tiers import ClassifierLoadError, ClassifyInput, LearnedConfig, build_classifier
from gateway.tiers.learned import (
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


# Real-looking prompts of the kinds the old template-trained model misrouted.
GRAMMAR_FIXES = [
    "Edit the following paragraph to correct any grammatical errors:\nShe didn't remembre where is her "
    "purse, so I thinks its in the car but he's say it's on kitchen table but he are not sure.",
    "Fix the grammar and spelling in this email: Hi Tom, i has attached the reports you asked for, let me "
    "know if their is anything missing. Thanks, Ana",
    "Please proofread this sentence: Their going to the park tomorow if the whether is good.",
    "Correct the grammatical mistakes: Me and him goes to school every days by bus.",
]
WRITING_AND_ROLE_PLAY = [
    "Write a short blog post about three things to do on a rainy weekend in Lisbon.",
    "Draft a friendly email to my landlord asking whether I can paint the living room.",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Compose a product description for a handmade ceramic coffee mug.",
    "Pretend you are Sherlock Holmes. What do you make of my muddy boots?",
    "Act as a travel guide for Kyoto and tell me what to see in one day.",
    "You are a pirate captain. Greet your new crew in character.",
    "Role-play as a friendly barista and take my order.",
]
LOGIC_PUZZLES = [
    "Anna is taller than Ben. Ben is taller than Carl. Is Carl taller than Anna? Explain.",
    "A farmer has 17 sheep and all but 9 run away. How many sheep does he have left?",
    "If it takes 5 machines 5 minutes to make 5 widgets, how long would it take 100 machines to make "
    "100 widgets?",
    "Three boxes are labelled apples, oranges and mixed, and every label is wrong. You may pick one fruit "
    "from one box. How do you relabel all the boxes?",
    "Tom is Mary's brother. Mary has two sisters and Tom has no brothers. How many children are in the "
    "family?",
]


@pytest.mark.parametrize("text", GRAMMAR_FIXES)
def test_grammar_fixes_go_small(text: str) -> None:
    assert build_classifier(LearnedConfig(), pools=POOLS).classify(user(text)).pool == "small"


def test_writing_and_role_play_stay_off_large() -> None:
    classifier = build_classifier(LearnedConfig(), pools=POOLS)
    pools = [classifier.classify(user(t)).pool for t in WRITING_AND_ROLE_PLAY]
    assert pools.count("large") == 0, pools


@pytest.mark.parametrize("text", LOGIC_PUZZLES)
def test_logic_puzzles_never_go_small(text: str) -> None:
    assert build_classifier(LearnedConfig(), pools=POOLS).classify(user(text)).pool != "small"


def test_shipped_model_metadata() -> None:
    model = LearnedModel.load()
    assert model.tiers == POOLS
    assert model.metrics["holdout_accuracy"] >= 0.8
    assert model.metrics["num_holdout"] >= 500
    assert model.featurizer.config.request_cues and model.featurizer.config.lead_words > 0


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
    with pytest.raises(ClassifierLoadError, match=r"does not exist; train one with `sortyard router train"):
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
        ("magic", "not a Sortyard router model"),
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
        "import sys, gateway.tiers, gateway.tiers.learned, gateway.tiers.examples,"
        " gateway.tiers.rules, gateway.cli.explain;"
        "from gateway.tiers import build_classifier, LearnedConfig, ClassifyInput;"
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
