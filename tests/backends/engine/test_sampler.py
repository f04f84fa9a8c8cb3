"""Sampler: seeded reproducibility whatever the batch, masks, penalties, logprobs."""

from __future__ import annotations

import itertools

import pytest
import torch

from backends.engine.sampler import Sampler, apply_penalties, masked_probs
from backends.engine.sampling_params import SamplingParams
from backends.engine.sequence import Sequence

_ids = itertools.count()


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
