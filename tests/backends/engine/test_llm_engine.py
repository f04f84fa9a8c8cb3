"""Engine behaviour on a tiny model: stops, n > 1, seeds, aborts, limits, and a random soak."""

from __future__ import annotations

import random
import time

import pytest

from backends.engine.background import BackgroundLimits
from backends.engine.config import EngineConfig
from backends.engine.errors import PromptTooLong
from backends.engine.sampling_params import SamplingParams
from tests.backends.engine.conftest import EngineFactory
from tests.backends.engine.tiny import EOS_ID

PROMPT = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160, 170, 180, 190, 200]


def run_all(engine, rid_prompts, params):  # type: ignore[no-untyped-def]
    for rid, prompt in rid_prompts:
        engine.add_request(rid, prompt, params)
    final = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            engine.check_invariants()
            if out.finished:
                final[out.request_id] = out
    return final


def test_stop_token_ids_and_max_tokens(make_engine: EngineFactory) -> None:
    engine = make_engine()
    free = engine.generate([PROMPT], SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))[0]
    tokens = free.outputs[0].token_ids
    assert len(tokens) == 6 and free.outputs[0].finish_reason == "length"
    stopped = engine.generate(
        [PROMPT], SamplingParams(temperature=0, max_tokens=6, stop_token_ids=[tokens[2]])
    )
    assert stopped[0].outputs[0].token_ids == tokens[: tokens.index(tokens[2]) + 1]
    assert stopped[0].outputs[0].finish_reason == "stop"
    assert stopped[0].outputs[0].stop_reason == tokens[2] and free.outputs[0].stop_reason is None


def test_stop_string_truncates_text(make_engine: EngineFactory) -> None:
    engine = make_engine()
    # printable prompt bytes, so the greedy continuation is some text we can cut
    free = engine.generate(["hello there"], SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))[0]
    text = free.outputs[0].text
    assert len(text) >= 4
    stop = text[2:4]
    out = engine.generate(["hello there"], SamplingParams(temperature=0, max_tokens=12, stop=[stop]))[0]
    assert out.outputs[0].finish_reason == "stop"
    assert out.outputs[0].text == text[: text.index(stop)]
    assert out.outputs[0].stop_reason == stop  # the output names the stop string that cut it


def test_eos_stops_unless_ignored(make_engine: EngineFactory) -> None:
    engine = make_engine()
    out = engine.generate([PROMPT], SamplingParams(temperature=0, max_tokens=4, stop_token_ids=[]))[0]
    assert EOS_ID not in out.outputs[0].token_ids[:-1]


def test_seed_reproduces_whatever_the_batch(make_engine: EngineFactory) -> None:
    engine = make_engine()
    params = SamplingParams(temperature=1.0, seed=123, max_tokens=10, ignore_eos=True)
    alone = engine.generate([PROMPT], params)[0].outputs[0].token_ids
    noise = [SamplingParams(temperature=1.0, max_tokens=7, ignore_eos=True)] * 5
    batch = engine.generate([[1, 2, 3]] * 2 + [PROMPT] + [[4, 5]] * 3, [*noise[:2], params, *noise[2:]])
    assert batch[2].outputs[0].token_ids == alone
    other = engine.generate(
        [PROMPT], SamplingParams(temperature=1.0, seed=124, max_tokens=10, ignore_eos=True)
    )
    assert other[0].outputs[0].token_ids != alone


def test_n_completions_share_prompt_blocks(make_engine: EngineFactory) -> None:
    engine = make_engine(enable_prefix_caching=False)
    prompt = PROMPT * 3  # 60 tokens: three full blocks to share
    engine.add_request(
        "n", prompt, SamplingParams(n=3, temperature=1.0, seed=7, max_tokens=5, ignore_eos=True)
    )
    out = None
    shared_seen = False
    while engine.has_unfinished_requests():
        for o in engine.step():
            out = o
        engine.check_invariants()
        seqs = engine.requests["n"].seqs if "n" in engine.requests else []
        tables = [s.block_table for s in seqs if s.block_table]
        if len(tables) == 3 and tables[0][:3] == tables[1][:3] == tables[2][:3]:
            shared_seen = True
    assert out is not None and out.finished and shared_seen
    assert [c.index for c in out.outputs] == [0, 1, 2]
    assert all(len(c.token_ids) == 5 and c.finish_reason == "length" for c in out.outputs)
    assert len({tuple(c.token_ids) for c in out.outputs}) > 1


def test_abort_frees_everything_at_once(make_engine: EngineFactory) -> None:
    engine = make_engine()
    engine.add_request("a", PROMPT * 4, SamplingParams(max_tokens=50, n=2))
    engine.add_request("b", PROMPT, SamplingParams(max_tokens=50))
    engine.step()
    engine.step()
    engine.abort_request("a")
    engine.abort_request("b")
    engine.abort_request("unknown")  # a no-op
    assert not engine.has_unfinished_requests()
    engine.check_invariants()
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks


def test_bad_requests_raise_value_error(make_engine: EngineFactory) -> None:
    engine = make_engine(max_model_len=64)
    with pytest.raises(PromptTooLong, match="maximum context"):
        engine.add_request("long", [1] * 64, SamplingParams())
    with pytest.raises(ValueError, match="empty"):
        engine.add_request("empty", [], SamplingParams())
    with pytest.raises(ValueError, match="token ids"):
        engine.add_request("bad", [10**9], SamplingParams())
    with pytest.raises(ValueError, match="temperature"):
        engine.add_request("t", [1], SamplingParams(temperature=-1))
    engine.add_request("dup", [1], SamplingParams())
    with pytest.raises(ValueError, match="already"):
        engine.add_request("dup", [1], SamplingParams())
    engine.abort_request("dup")


def test_prompt_bigger_than_the_pool_is_rejected(make_engine: EngineFactory) -> None:
    engine = make_engine(kv_cache_bytes=4 * 8192)  # four blocks: 64 tokens
    with pytest.raises(
        PromptTooLong, match="KV cache"
    ):  # a ValueError: the server's 400 context_length_exceeded
        engine.add_request("big", [1] * 100, SamplingParams())


def test_generation_past_the_pool_ends_with_length(make_engine: EngineFactory) -> None:
    engine = make_engine(kv_cache_bytes=4 * 8192)  # 64 slots in all
    out = engine.generate([[1] * 50], SamplingParams(max_tokens=100, ignore_eos=True))[0]
    assert out.outputs[0].finish_reason == "length"
    assert len(out.outputs[0].token_ids) >= 14


@pytest.mark.parametrize("length", [0, -1])
def test_a_context_of_no_tokens_is_refused(length: int) -> None:
    """``--max-model-len 0`` was read as "the model's own" and served a context the user never asked for."""
    with pytest.raises(ValueError, match="max_model_len must be >= 1"):
        EngineConfig(model="m", max_model_len=length)


def test_max_model_len_ends_with_length(make_engine: EngineFactory) -> None:
    engine = make_engine(max_model_len=32)
    out = engine.generate([[1] * 30], SamplingParams(max_tokens=None, ignore_eos=True))[0]
    assert out.outputs[0].finish_reason == "length" and len(out.outputs[0].token_ids) == 2


def test_random_soak_with_aborts_keeps_the_pool_consistent(make_engine: EngineFactory) -> None:
    rng = random.Random(0)
    engine = make_engine(kv_cache_bytes=40 * 8192, max_num_batched_tokens=64, max_num_seqs=16)
    live: set[str] = set()
    submitted = finished = 0
    while submitted < 500 or engine.has_unfinished_requests():
        for _ in range(rng.randint(0, 6)):
            if submitted >= 500:
                break
            prompt = [rng.randrange(256) for _ in range(rng.randint(1, 60))]
            params = SamplingParams(
                n=rng.choice([1, 1, 1, 2]),
                temperature=rng.choice([0.0, 1.0]),
                max_tokens=rng.randint(1, 12),
                ignore_eos=True,
            )
            rid = f"r{submitted}"
            engine.add_request(
                rid, prompt, params, priority=rng.randint(0, 2), cache_salt=rng.choice([None, "x"])
            )
            live.add(rid)
            submitted += 1
        if live and rng.random() < 0.15:
            victim = rng.choice(sorted(live))
            engine.abort_request(victim)
            live.discard(victim)
        for out in engine.step():
            if out.finished:
                live.discard(out.request_id)
                finished += 1
        engine.check_invariants()
    assert not live
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
    assert finished > 350


def test_outputs_say_when_a_request_was_first_scheduled(make_engine: EngineFactory) -> None:
    engine = make_engine(max_num_seqs=1)
    params = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)
    before = time.perf_counter()
    engine.add_request("a", [5, 6, 7], params)
    engine.add_request("b", [5, 6, 8], params)  # waits: one sequence runs at a time
    seen: dict[str, set[float | None]] = {"a": set(), "b": set()}
    while engine.has_unfinished_requests():
        for out in engine.step():
            seen[out.request_id].add(out.metrics.first_scheduled_s)
    [a], [b] = seen["a"], seen["b"]  # one value per request, from its first output on
    assert a is not None and b is not None
    assert before <= a < b  # "b" queued until "a" finished


def test_priority_classes_reorder_steps_never_tokens(make_engine: EngineFactory) -> None:
    """Worse classes sit out a better class's prompt steps and chunk their own prompts beside it; what
    each request answers does not change."""
    prompts = [[(7 * i + j) % 200 + 1 for j in range(5 + 9 * i)] for i in range(6)]
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    reference = make_engine()
    assert reference.scheduler.background.limits == BackgroundLimits(16, 2)  # the CPU's defaults
    expected = run_all(reference, [(f"r{i}", p) for i, p in enumerate(prompts)], params)
    engine = make_engine(background_prefill_tokens=3, background_decode_seqs=1)
    engine.add_request("r0", prompts[0], params, priority=1)
    engine.step()  # a batch line is running when the better class arrives: it sits their prompts out
    for i in (1, 2):
        engine.add_request(f"r{i}", prompts[i], params, priority=0)
    engine.step()
    for i in (3, 4, 5):  # more batch lines: their prompts compute 3 tokens a step beside the others
        engine.add_request(f"r{i}", prompts[i], params, priority=1)
    got = run_all(engine, [], params)
    assert {r: o.outputs[0].token_ids for r, o in got.items()} == {
        r: o.outputs[0].token_ids for r, o in expected.items()
    }
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks


def test_long_prefill_cap_changes_steps_never_tokens(make_engine: EngineFactory) -> None:
    """Long prompts prefill in chunks of ``long_prefill_token_threshold``, a short prompt sent beside one
    answers before its prefill ends, every request answers as without the cap, and no block is kept."""
    prompts = [[(5 * i + j) % 200 + 1 for j in range(30 + 11 * i)] for i in range(4)]
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    expected = run_all(make_engine(), [(f"r{i}", p) for i, p in enumerate(prompts)], params)
    engine = make_engine(long_prefill_token_threshold=7)
    engine.add_request("r3", prompts[3], params)  # 63 tokens: 9 steps of prompt
    engine.step()
    for i in range(3):
        engine.add_request(f"r{i}", prompts[i], params)
    first_token_step: dict[str, int] = {}
    got = {}
    step = 0
    while engine.has_unfinished_requests():
        step += 1
        for out in engine.step():
            engine.check_invariants()
            if out.outputs[0].token_ids:
                first_token_step.setdefault(out.request_id, step)
            if out.finished:
                got[out.request_id] = out
    assert first_token_step["r0"] < first_token_step["r3"]  # 30 tokens of 7 a step, beside the long one
    assert {r: o.outputs[0].token_ids for r, o in got.items()} == {
        r: o.outputs[0].token_ids for r, o in expected.items()
    }
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
