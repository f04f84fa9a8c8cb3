"""Structured outputs in the engine on a tiny random-weight Llama: its logits know nothing of JSON, so
every output that parses and validates is the mask's doing. Batching, n > 1, preemption, prefix caching,
speculative decoding, stop strings and length cuts each keep the output inside the grammar."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest

from backends.engine.llm_engine import LLMEngine
from backends.engine.outputs import CompletionOutput
from backends.engine.sampling_params import SamplingParams
from backends.engine.structured_output import StructuredOutput
from backends.engine.structured_output.errors import GrammarError
from backends.engine.structured_output.matcher import SequenceGrammar
from tests.backends.engine.conftest import EngineFactory
from tests.backends.engine.tiny import EOS_ID
from tools.structured_schemas import SCHEMAS, bounded

BOUNDED = {name: bounded(schema, 16) for name, schema in SCHEMAS.items()}
"""The schemas with free-text strings cut to 16 characters: a random model may ramble in one for good."""
PROMPTS = ["Give me JSON.", "hello there", "abc abc abc abc", "{"]
MAX_TOKENS = 400  # the schemas bound every string and list: a masked random model ends well before


def validate(text: str, schema: dict[str, Any]) -> None:
    jsonschema.validate(json.loads(text), schema, format_checker=jsonschema.FormatChecker())


def run(engine: LLMEngine, requests: list[tuple[str, SamplingParams]]) -> list[list[CompletionOutput]]:
    """Run (prompt, params) requests in one batch to the end; each request's completions, in order."""
    for i, (prompt, params) in enumerate(requests):
        engine.add_request(f"r{i}", prompt, params)
    done: dict[str, list[CompletionOutput]] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            engine.check_invariants()
            if out.finished:
                done[out.request_id] = out.outputs
    return [done[f"r{i}"] for i in range(len(requests))]


def json_params(name: str, **opts: Any) -> SamplingParams:
    opts = {"temperature": 0.0, "max_tokens": MAX_TOKENS, **opts}
    return SamplingParams(structured=StructuredOutput(json_schema=json.dumps(BOUNDED[name])), **opts)


def test_every_schema_validates_in_a_mixed_batch(make_engine: EngineFactory) -> None:
    engine = make_engine()
    free = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    [[alone]] = run(engine, [(PROMPTS[0], free)])
    requests = [(PROMPTS[0], free)]
    for i, name in enumerate(SCHEMAS):
        requests.append((PROMPTS[i % len(PROMPTS)], json_params(name)))
        requests.append((PROMPTS[i % len(PROMPTS)], json_params(name, temperature=1.0, seed=i)))
    outputs = run(engine, requests)
    assert outputs[0][0].token_ids == alone.token_ids  # a free row beside masked ones is untouched
    for (_, params), [out] in zip(requests[1:], outputs[1:], strict=True):
        assert params.structured is not None and params.structured.json_schema is not None
        assert out.finish_reason == "stop", out.text
        assert out.token_ids[-1] == EOS_ID and EOS_ID not in out.token_ids[:-1]
        validate(out.text, json.loads(params.structured.json_schema))


def test_json_object_regex_choice_and_grammar(make_engine: EngineFactory) -> None:
    engine = make_engine()
    kinds = [
        StructuredOutput(json_object=True),
        StructuredOutput(regex=r"[0-9]{3}-[a-z]{2,4}"),
        StructuredOutput(choice=("yes", "no", 'say "maybe"')),
        StructuredOutput(grammar='root ::= "color: " ("red" | "green") ("!" | "")'),
    ]
    # json_object greedy only: its strings are unbounded, and a random model may ramble in one for good
    runs = [[(PROMPTS[0], 0.0), (PROMPTS[1], 0.0)]] + [[(PROMPTS[1], 0.0), (PROMPTS[2], 1.0)]] * 3
    requests = [
        (prompt, SamplingParams(temperature=temp, seed=3, max_tokens=MAX_TOKENS, structured=kind))
        for kind, pairs in zip(kinds, runs, strict=True)
        for prompt, temp in pairs
    ]
    outputs = [out for [out] in run(engine, requests)]
    assert all(out.finish_reason == "stop" for out in outputs)
    obj_outputs, regex_outputs, choice_outputs, grammar_outputs = (outputs[i : i + 2] for i in range(0, 8, 2))
    assert all(isinstance(json.loads(out.text), dict) for out in obj_outputs)
    assert all(re.fullmatch(r"[0-9]{3}-[a-z]{2,4}", out.text) for out in regex_outputs)
    assert all(out.text in ("yes", "no", 'say "maybe"') for out in choice_outputs)
    assert all(re.fullmatch(r"color: (red|green)!?", out.text) for out in grammar_outputs)


def test_a_length_cut_is_a_valid_prefix(make_engine: EngineFactory) -> None:
    engine = make_engine()
    spec = StructuredOutput(json_schema=json.dumps(BOUNDED["invoice"]))
    [[out]] = run(engine, [(PROMPTS[0], SamplingParams(temperature=0, max_tokens=7, structured=spec))])
    assert out.finish_reason == "length" and len(out.token_ids) == 7
    grammar = SequenceGrammar(engine.grammar_compiler.compile(spec))
    assert all(grammar.accept(t) for t in out.token_ids) and not grammar.is_completed


def test_eos_comes_only_when_complete_even_if_ignored(make_engine: EngineFactory) -> None:
    """ignore_eos lets free text run on; a grammar ends at its stop token all the same."""
    engine = make_engine()
    spec = StructuredOutput(choice=("alpha", "beta"))
    params = SamplingParams(temperature=0, max_tokens=50, ignore_eos=True, structured=spec)
    [[out]] = run(engine, [(PROMPTS[1], params)])
    assert out.text in ("alpha", "beta") and out.finish_reason == "stop" and out.token_ids[-1] == EOS_ID


def test_stop_string_cuts_inside_the_grammar(make_engine: EngineFactory) -> None:
    engine = make_engine()
    [[full]] = run(engine, [(PROMPTS[0], json_params("sentiment"))])
    stop = '"confidence"'
    assert stop in full.text
    [[cut]] = run(engine, [(PROMPTS[0], json_params("sentiment", stop=[stop]))])
    assert cut.finish_reason == "stop" and cut.text == full.text[: full.text.index(stop)]


def test_each_of_n_completions_has_its_own_grammar(make_engine: EngineFactory) -> None:
    engine = make_engine()
    [outs] = run(engine, [(PROMPTS[2], json_params("todo_list", n=4, temperature=1.0, seed=7))])
    assert len(outs) == 4 and len({o.text for o in outs}) > 1
    for out in outs:
        assert out.finish_reason == "stop"
        validate(out.text, BOUNDED["todo_list"])


def test_preemption_keeps_the_grammar_in_step(make_engine: EngineFactory) -> None:
    """Recompute after preemption keeps the output tokens and the grammar state that accepted them."""
    requests = [
        (p, json_params(name))
        for p, name in zip(PROMPTS, ["person", "invoice", "todo_list", "sentiment"], strict=True)
    ]
    roomy = run(make_engine(), requests)
    tight = make_engine(kv_cache_bytes=160 << 10)  # 20 blocks: the longest fits alone, not beside the rest
    outputs = run(tight, requests)
    assert tight.stats().num_preemptions > 0
    assert [o[0].token_ids for o in outputs] == [o[0].token_ids for o in roomy]
    for (_, params), [out] in zip(requests, outputs, strict=True):
        assert params.structured is not None and params.structured.json_schema is not None
        validate(out.text, json.loads(params.structured.json_schema))


def test_prefix_cache_hits_keep_the_output(make_engine: EngineFactory) -> None:
    engine = make_engine()
    prompt = "a long shared prompt that fills more than one KV block, " * 3
    [[first]] = run(engine, [(prompt, json_params("weather_query"))])
    hits = engine.stats().prefix_cache_hits
    [[second]] = run(engine, [(prompt, json_params("weather_query"))])
    assert engine.stats().prefix_cache_hits > hits and second.token_ids == first.token_ids


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_speculative_decoding_checks_proposals(
    make_engine: EngineFactory, tiny_dirs: dict[str, Any], method: str
) -> None:
    """Greedy: token for token the output without speculation. Sampled: valid. Proposals the grammar
    refuses are cut, the rest verified against masked rows, and some are accepted."""
    requests = [
        (p, json_params(name)) for p, name in zip(PROMPTS, ["person", "invoice", "sentiment"], strict=False)
    ]
    requests += [
        (p, json_params(name, temperature=1.0, seed=5))
        for p, name in zip(PROMPTS, ["shape", "todo_list"], strict=False)
    ]
    plain = run(make_engine(), requests)
    opts: dict[str, Any] = {"speculative_method": method, "num_speculative_tokens": 3}
    if method == "draft":
        opts["speculative_model"] = str(tiny_dirs["gqa"])  # the target itself: its proposals often pass
    engine = make_engine(**opts)
    outputs = run(engine, requests)
    stats = engine.stats()
    assert stats.spec_num_draft_tokens > 0 and stats.spec_num_accepted_tokens > 0
    greedy = [i for i, (_, p) in enumerate(requests) if p.is_greedy]
    assert [outputs[i][0].token_ids for i in greedy] == [plain[i][0].token_ids for i in greedy]
    for (_, params), [out] in zip(requests, outputs, strict=True):
        assert params.structured is not None and params.structured.json_schema is not None
        assert out.finish_reason == "stop"
        validate(out.text, json.loads(params.structured.json_schema))


def test_an_invalid_constraint_is_refused_at_admission(make_engine: EngineFactory) -> None:
    engine = make_engine()
    bad = [
        (StructuredOutput(json_schema='{"type": "frobnicate"}'), "json_schema"),
        (StructuredOutput(json_schema="{not json"), "json_schema"),
        (StructuredOutput(regex="a(b"), "regex"),
        (StructuredOutput(grammar="root ::= missing_rule"), "grammar"),
        (StructuredOutput(structural_tag='{"type": "nope"}'), "structural_tag"),
    ]
    for spec, kind in bad:
        with pytest.raises(GrammarError) as info:
            engine.add_request("bad", PROMPTS[0], SamplingParams(structured=spec))
        assert info.value.kind == kind and "/project/" not in str(info.value)
        assert not engine.has_unfinished_requests()
