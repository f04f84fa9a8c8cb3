"""Speculative decoding inside the engine: greedy output token for token the same as without it (with
batching, chunked prefill, preemption, prefix caching and sliding windows), limits honoured exactly,
and every block given back, in the target's pool and the draft's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from backends.engine.llm_engine import LLMEngine
from backends.engine.sampling_params import SamplingParams
from backends.engine.spec_decode.draft import DraftProposer
from tests.backends.engine.conftest import EngineFactory

# repetitive prompts, so prompt lookup finds matches; different lengths, so steps mix prefill and decode
PROMPTS = [
    [10, 20, 30, 40, 50, 10, 20, 30, 40, 50, 10, 20, 30],
    [5, 6, 7, 8] * 9,
    [100, 101, 102, 103, 104, 105, 106, 107, 108, 109] * 3 + [100, 101],
    [200 + i % 7 for i in range(50)],
]
GREEDY = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)


def run(engine: LLMEngine, prompts: list[list[int]], params: SamplingParams) -> list[list[int]]:
    for i, prompt in enumerate(prompts):
        engine.add_request(f"r{i}", prompt, params)
    done: dict[str, list[int]] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            engine.check_invariants()
            if out.finished:
                done[out.request_id] = out.outputs[0].token_ids
    return [done[f"r{i}"] for i in range(len(prompts))]


@pytest.mark.parametrize(
    "variant, opts",
    [
        ("gqa", {}),
        ("gqa", {"max_num_batched_tokens": 24}),  # chunked prefill beside speculative decodes
        ("gqa", {"kv_cache_bytes": 48 << 10}),  # a pool small enough to preempt
        ("mistral_window8", {}),  # every layer slides, passed blocks freed
        ("gemma3_window8", {}),  # sliding and full layers: two KV groups
        ("gqa", {"kv_cache_dtype": "int8"}),  # proposals read a quantized cache through the context path
    ],
)
def test_ngram_greedy_output_is_unchanged(
    make_engine: EngineFactory, variant: str, opts: dict[str, Any]
) -> None:
    plain = run(make_engine(variant, **opts), PROMPTS, GREEDY)
    engine = make_engine(variant, speculative_method="ngram", num_speculative_tokens=3, **opts)
    assert run(engine, PROMPTS, GREEDY) == plain
    stats = engine.stats()
    assert stats.spec_num_drafts > 0 and stats.spec_num_draft_tokens >= stats.spec_num_drafts
    assert 0 <= stats.spec_num_accepted_tokens <= stats.spec_num_draft_tokens
    assert sum(stats.spec_accepted_per_pos) == stats.spec_num_accepted_tokens


def test_prefix_cache_hits_stay_exact(make_engine: EngineFactory) -> None:
    """The second round hits the blocks the first cached: speculative tokens never got into them."""
    engine = make_engine(speculative_method="ngram", num_speculative_tokens=4)
    first = run(engine, PROMPTS, GREEDY)
    hits = engine.stats().prefix_cache_hits
    assert run(engine, PROMPTS, GREEDY) == first
    assert engine.stats().prefix_cache_hits > hits
    assert first == run(make_engine(), PROMPTS, GREEDY)


def test_limits_are_exact(make_engine: EngineFactory) -> None:
    engine = make_engine(speculative_method="ngram", num_speculative_tokens=4)
    for max_tokens in (1, 2, 5, 17):
        params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
        assert [len(t) for t in run(engine, PROMPTS, params)] == [max_tokens] * len(PROMPTS)
    long = make_engine(speculative_method="ngram", num_speculative_tokens=4, max_model_len=48)
    outs = run(long, PROMPTS[:2], SamplingParams(temperature=0, max_tokens=100, ignore_eos=True))
    assert [len(p) + len(o) for p, o in zip(PROMPTS[:2], outs, strict=True)] == [48, 48]


def test_stop_token_inside_accepted_run_ends_there(make_engine: EngineFactory) -> None:
    plain = run(make_engine(), PROMPTS, GREEDY)
    stop = plain[1][len(plain[1]) // 2]
    params = SamplingParams(temperature=0, max_tokens=40, stop_token_ids=[stop], ignore_eos=True)
    expected = run(make_engine(), PROMPTS, params)
    assert run(make_engine(speculative_method="ngram", num_speculative_tokens=4), PROMPTS, params) == expected
    assert expected[1][-1] == stop


def test_seeded_sampling_is_reproducible(make_engine: EngineFactory) -> None:
    params = SamplingParams(temperature=0.8, top_p=0.9, seed=7, max_tokens=30, ignore_eos=True)
    a = run(make_engine(speculative_method="ngram"), PROMPTS, params)
    b = run(make_engine(speculative_method="ngram"), PROMPTS, params)
    assert a == b and all(len(t) == 30 for t in a)


def test_penalties_and_logprobs_decode_without_speculation(make_engine: EngineFactory) -> None:
    engine = make_engine(speculative_method="ngram")
    params = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True, repetition_penalty=1.3)
    assert run(engine, PROMPTS, params) == run(make_engine(), PROMPTS, params)
    logprobs = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True, logprobs=2)
    run(engine, PROMPTS, logprobs)
    assert engine.stats().spec_num_drafts == 0


def test_big_batches_skip_speculation(make_engine: EngineFactory) -> None:
    engine = make_engine(speculative_method="ngram", speculative_max_batch=2)
    assert run(engine, PROMPTS, GREEDY) == run(make_engine(), PROMPTS, GREEDY)
    # four sequences run until the shortest finish; speculation starts only once fewer than 2 remain
    assert engine.stats().spec_num_drafts < engine.stats().num_generated_tokens


@pytest.mark.parametrize("draft", ["gqa", "mqa"])
def test_draft_model_greedy_output_is_unchanged(
    make_engine: EngineFactory, tiny_dirs: dict[str, Path], draft: str
) -> None:
    """The target itself as its draft agrees on every token; another model on fewer."""
    plain = run(make_engine(), PROMPTS, GREEDY)
    engine = make_engine(
        speculative_method="draft", speculative_model=str(tiny_dirs[draft]), num_speculative_tokens=3
    )
    assert run(engine, PROMPTS, GREEDY) == plain
    stats = engine.stats()
    assert stats.spec_num_drafts > 0
    if draft == "gqa":
        assert stats.spec_num_accepted_tokens == stats.spec_num_draft_tokens
    proposer = engine.proposer
    assert isinstance(proposer, DraftProposer)
    proposer.propose([])  # releases the mirrors of finished sequences
    assert not proposer.mirrors
    assert proposer.blocks.num_free_blocks == proposer.blocks.num_blocks


def test_draft_model_sampling_and_aborts(make_engine: EngineFactory, tiny_dirs: dict[str, Path]) -> None:
    engine = make_engine(speculative_method="draft", speculative_model=str(tiny_dirs["mqa"]))
    params = SamplingParams(temperature=1.0, seed=3, max_tokens=25, ignore_eos=True)
    outs = run(engine, PROMPTS, params)
    assert all(len(t) == 25 for t in outs)
    engine.add_request("gone", PROMPTS[0], params)
    for _ in range(3):
        engine.step()
    engine.abort_request("gone")
    proposer = engine.proposer
    assert isinstance(proposer, DraftProposer)
    proposer.propose([])
    proposer.blocks.check_invariants([m.seq for m in proposer.mirrors.values()])
    assert proposer.blocks.num_free_blocks == proposer.blocks.num_blocks


def test_a_draft_with_another_vocabulary_is_refused(
    make_engine: EngineFactory, tiny_dirs: dict[str, Path], tmp_path: Path
) -> None:
    other = tmp_path / "other-vocab"
    shutil.copytree(tiny_dirs["gqa"], other)
    config = json.loads((other / "config.json").read_text())
    config["vocab_size"] += 64
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="vocabulary"):
        make_engine(speculative_method="draft", speculative_model=str(other))
