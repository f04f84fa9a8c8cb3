"""Sampler: seeded reproducibility whatever the batch, masks, penalties, logprobs."""

from __future__ import annotations

import itertools

import pytest
import torch

from backends.engine.sampler import Sampler, apply_penalties, masked_probs
from backends.engine.sampling_params import SamplingParams
from backends.engine.sequence import Sequence
from tests.backends.engine.conftest import EngineFactory

_ids = itertools.count()
PROMPT = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120]


def seq(
    params: SamplingParams,
    tokens: list[int] | None = None,
    num_prompt: int | None = None,
    seed: int | None = None,
) -> Sequence:
    n = next(_ids)
    tokens = tokens or [0]
    s = Sequence(
        seq_id=n,
        request_id=f"r{n}",
        token_ids=list(tokens),
        params=params,
        arrival=n,
        num_prompt_tokens=num_prompt or len(tokens),
    )
    if seed is not None:
        s.generator = torch.Generator().manual_seed(seed)
    return s


def test_seeded_sampling_ignores_the_rest_of_the_batch() -> None:
    torch.manual_seed(0)
    logits = torch.randn(5, 100)
    params = SamplingParams(temperature=0.9, top_p=0.95)
    sampler = Sampler()
    alone = [sampler(logits[2:3].clone(), [seq(params, seed=42)]).token_ids[0][0] for _ in range(1)]
    s_alone = seq(params, seed=42)
    run_alone = [sampler(logits[2:3].clone(), [s_alone]).token_ids[0][0] for _ in range(20)]
    s_batch = seq(params, seed=42)
    others = [seq(params, seed=i) for i in range(4)]
    run_batch = []
    for _ in range(20):
        batch = [others[0], others[1], s_batch, others[2], others[3]]
        run_batch.append(sampler(logits.clone(), batch).token_ids[2][0])
    assert run_alone == run_batch and alone[0] == run_alone[0]
    assert len(set(run_alone)) > 1  # it really samples


def test_greedy_is_argmax() -> None:
    logits = torch.tensor([[0.1, 3.0, 0.2], [5.0, 0.0, 0.0]])
    out = Sampler()(logits, [seq(SamplingParams(temperature=0)), seq(SamplingParams(top_k=1), seed=1)])
    assert out.token_ids == [[1], [0]]


def test_top_k_keeps_k_tokens() -> None:
    logits = torch.tensor([[1.0, 4.0, 3.0, 2.0]])
    probs = masked_probs(logits, [seq(SamplingParams(top_k=2))])
    assert (probs[0] > 0).tolist() == [False, True, True, False]


def test_top_p_keeps_the_smallest_nucleus() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    probs = masked_probs(logits, [seq(SamplingParams(top_p=0.7))])
    assert (probs[0] > 0).tolist() == [True, True, False, False]
    probs = masked_probs(logits, [seq(SamplingParams(top_p=0.1))])
    assert (probs[0] > 0).tolist() == [True, False, False, False]


def test_min_p_drops_unlikely_tokens() -> None:
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.07, 0.03]]))
    probs = masked_probs(logits, [seq(SamplingParams(min_p=0.1))])
    assert (probs[0] > 0).tolist() == [True, True, True, False]


def test_masks_are_per_row() -> None:
    logits = torch.log(torch.tensor([[0.4, 0.3, 0.2, 0.1]] * 2))
    probs = masked_probs(logits, [seq(SamplingParams(top_k=1)), seq(SamplingParams())])
    assert (probs[0] > 0).sum() == 1 and (probs[1] > 0).sum() == 4


def test_frequency_and_presence_penalties() -> None:
    row = torch.zeros(5)
    s = seq(SamplingParams(frequency_penalty=0.5, presence_penalty=1.0), tokens=[4, 1, 1, 2], num_prompt=1)
    apply_penalties(row, s)
    assert row.tolist() == [0.0, -2.0, -1.5, 0.0, 0.0]  # prompt token 4 is not penalised


def test_repetition_penalty_divides_positive_multiplies_negative() -> None:
    row = torch.tensor([2.0, -2.0, 2.0])
    apply_penalties(row, seq(SamplingParams(repetition_penalty=2.0), tokens=[0, 1], num_prompt=1))
    assert row.tolist() == [1.0, -4.0, 2.0]


def test_logprobs_are_raw_model_logprobs() -> None:
    logits = torch.tensor([[1.0, 2.0, 3.0]])
    out = Sampler()(logits, [seq(SamplingParams(temperature=0, logprobs=2, presence_penalty=1.0))])
    ref = torch.log_softmax(logits[0], -1)
    chosen, top = out.logprobs[0]  # type: ignore[misc]
    assert chosen == pytest.approx(float(ref[2]))
    assert [t for t, _ in top] == [2, 1]


def test_validate_names_the_field() -> None:
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0).validate()
    with pytest.raises(ValueError, match="logprobs"):
        SamplingParams(logprobs=99).validate()
    with pytest.raises(ValueError, match="n "):
        SamplingParams(n=0).validate()


def test_logit_bias_bans_and_favours_tokens_of_its_row_only() -> None:
    logits = torch.tensor([[0.1, 3.0, 0.2], [0.1, 3.0, 0.2]])
    biased = seq(SamplingParams(temperature=0, logit_bias={1: -100.0, 2: 1.0}))
    out = Sampler()(logits, [biased, seq(SamplingParams(temperature=0))])
    assert out.token_ids == [[2], [1]]
    with pytest.raises(ValueError, match="logit_bias"):
        SamplingParams(logit_bias={1: 101.0}).validate()


def test_a_huge_top_k_is_no_filter_and_fails_no_other_row() -> None:
    torch.manual_seed(0)
    logits = torch.randn(3, 50)
    huge = seq(SamplingParams(top_k=2**64), seed=1)  # past int64: once an overflow that failed every row
    rows = [seq(SamplingParams(temperature=0.7), seed=2), huge, seq(SamplingParams(top_k=2), seed=3)]
    probs = masked_probs(logits, rows)
    assert (probs[1] > 0).sum() == 50 and (probs[2] > 0).sum() == 2
    assert torch.allclose(probs[1], logits[1].softmax(-1))  # at or above the vocabulary: no filter
    out = Sampler()(logits.clone(), rows)
    assert len(out.token_ids) == 3


def test_a_huge_top_k_request_and_its_batch_mate_both_finish(make_engine: EngineFactory) -> None:
    engine = make_engine()
    story = SamplingParams(temperature=0.7, max_tokens=12, ignore_eos=True, seed=1)
    huge = SamplingParams(temperature=1.0, top_k=18446744073709551616, max_tokens=4, ignore_eos=True)
    outs = engine.generate([PROMPT, PROMPT[:5]], [story, huge])
    assert [o.outputs[0].finish_reason for o in outs] == ["length", "length"]
    assert [len(o.outputs[0].token_ids) for o in outs] == [12, 4]


def test_a_temperature_below_the_epsilon_is_greedy(make_engine: EngineFactory) -> None:
    assert SamplingParams(temperature=1e-39).is_greedy and not SamplingParams(temperature=1e-5).is_greedy
    engine = make_engine()
    greedy = engine.generate([PROMPT], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))[0]
    tiny = engine.generate([PROMPT], SamplingParams(temperature=1e-39, max_tokens=8, ignore_eos=True))[0]
    assert tiny.outputs[0].token_ids == greedy.outputs[0].token_ids


def test_the_smallest_sampled_temperature_gives_finite_probabilities() -> None:
    logits = torch.tensor([[300.0, 299.9, -300.0, float("-inf")]])  # -inf: a grammar's ban
    probs = masked_probs(logits, [seq(SamplingParams(temperature=1e-5))])
    assert not probs.isnan().any() and probs[0].tolist() == [1.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("penalty", [1e-40, 1e-46, 1e-300, 1e300])
def test_an_extreme_repetition_penalty_never_gives_nan(penalty: float) -> None:
    row = torch.tensor([2.0, 0.0, -2.0, float("-inf"), 1.0])
    apply_penalties(row, seq(SamplingParams(repetition_penalty=penalty), tokens=[0, 1, 2, 3]))
    assert not row.isnan().any() and row[3] == float("-inf")  # a grammar's ban stays one
    for temperature in (1e-5, 0.7, 2.0):
        probs = masked_probs(row.unsqueeze(0), [seq(SamplingParams(temperature=temperature))])
        assert probs.isfinite().all() and probs.sum() > 0
    out = Sampler()(row.unsqueeze(0).clone(), [seq(SamplingParams(temperature=0))])
    assert out.token_ids == [[0 if penalty < 1 else 4]]  # tiny: the seen token wins; huge: it is shunned


def test_a_tiny_repetition_penalty_keeps_the_seen_tokens_in_order() -> None:
    row = torch.tensor([1.0, 2.0, 5.0])
    apply_penalties(row, seq(SamplingParams(repetition_penalty=1e-40), tokens=[0, 1]))
    assert row.isfinite().all() and row[1] > row[0] > row[2]  # not tied at inf: argmax would take token 0
    out = Sampler()(row.unsqueeze(0).clone(), [seq(SamplingParams(temperature=0))])
    assert out.token_ids == [[1]]


def test_validate_refuses_non_finite_temperature_and_repetition_penalty() -> None:
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=float("inf")).validate()
    with pytest.raises(ValueError, match="repetition_penalty"):
        SamplingParams(repetition_penalty=float("inf")).validate()
    with pytest.raises(ValueError, match="top_k"):
        SamplingParams(top_k=-2).validate()
    SamplingParams(top_k=2**64, repetition_penalty=1e-40, temperature=1e-39).validate()


def test_a_logit_bias_outside_the_vocabulary_fails_no_row() -> None:
    logits = torch.tensor([[0.1, 3.0, 0.2], [0.1, 3.0, 0.2]])
    biased = seq(SamplingParams(temperature=0, logit_bias={2: 5.0, 3: 1.0, 2**64: 1.0}))
    out = Sampler()(logits, [biased, seq(SamplingParams(temperature=0))])
    assert out.token_ids == [[2], [1]]
