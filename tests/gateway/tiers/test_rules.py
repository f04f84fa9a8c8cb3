"""Rules classifier: each condition, ordering, reasons, load errors."""

from __future__ import annotations

import pytest

from gateway.tiers import ClassifierLoadError, ClassifyInput, Rule, RulesConfig, build_classifier

POOLS = ["small", "medium", "large"]


def user(text: str, **kw: object) -> ClassifyInput:
    return ClassifyInput(messages=[{"role": "user", "content": text}], **kw)  # type: ignore[arg-type]


@pytest.fixture
def rules() -> RulesConfig:
    return RulesConfig(
        rules=[
            Rule(pool="large", min_prompt_tokens=2000),
            Rule(pool="large", keywords=["prove", "system design"]),
            Rule(pool="medium", regex=[r"```"], name="has-code"),
            Rule(pool="medium", tools=True),
            Rule(pool="small", json_mode=True, max_prompt_tokens=500),
            Rule(pool="medium", min_turns=3),
        ],
        fallback_pool="small",
    )


@pytest.mark.parametrize(
    ("request_", "pool", "reason"),
    [
        (user("x " * 5000), "large", "rules tokens>=2000"),
        (user("hi", num_prompt_tokens=2500), "large", "rules tokens>=2000"),
        (user("Please PROVE this lemma"), "large", "rules keyword:prove"),
        (user("a System   Design question"), "large", "rules keyword:system   design"),
        (user("improve my essay"), "small", "rules no-match fallback"),  # whole words only
        (user("fix ```x=1```"), "medium", "rules has-code"),
        (user("call it", tools=True), "medium", "rules tools"),
        (user("give json", json_mode=True), "small", "rules tokens<=500 json"),
        (user("hello"), "small", "rules no-match fallback"),
    ],
)
def test_rules(rules: RulesConfig, request_: ClassifyInput, pool: str, reason: str) -> None:
    decision = build_classifier(rules, pools=POOLS).classify(request_)
    assert (decision.pool, decision.reason) == (pool, reason)
    assert decision.probabilities is None


@pytest.mark.parametrize(
    ("text", "pool"),
    [
        ("请写一段代码来排序列表", "large"),  # Chinese: no spaces between words
        ("このコードを直してください", "large"),  # Japanese, katakana keyword
        ("코드를 작성해 주세요", "large"),  # Korean: a particle glued to the keyword
        ("โปรดเขียนโค้ดให้หน่อย", "large"),  # Thai
        ("代码", "large"),
        ("decode this", "small"),  # Latin keywords stay whole words
        ("source code here", "large"),
    ],
)
def test_keywords_in_scripts_without_spaces_match_inside_a_run_of_letters(text: str, pool: str) -> None:
    config = RulesConfig(
        rules=[Rule(pool="large", keywords=["代码", "コード", "코드", "โค้ด", "code"])], fallback_pool="small"
    )
    decision = build_classifier(config, pools=POOLS).classify(user(text))
    assert decision.pool == pool
    assert decision.reason.isascii()  # the route reason is a header: the keyword is escaped there


def test_a_keyword_outside_ascii_is_named_by_its_escapes_in_the_reason() -> None:
    config = RulesConfig(rules=[Rule(pool="large", keywords=["代码"])], fallback_pool="small")
    decision = build_classifier(config, pools=POOLS).classify(user("写代码"))
    assert decision.reason == "rules keyword:\\u4ee3\\u7801"


def test_turns_count_user_messages(rules: RulesConfig) -> None:
    messages = [{"role": r, "content": "hello"} for r in ("user", "assistant") * 3]
    decision = build_classifier(rules, pools=POOLS).classify(ClassifyInput(messages=messages))
    assert (decision.pool, decision.reason) == ("medium", "rules turns>=3")


def test_default_fallback_is_small_and_tier_pools_apply() -> None:
    config = RulesConfig(rules=[Rule(pool="large", keywords=["prove"])], tier_pools={"large": "big"})
    classifier = build_classifier(config, pools=["small", "big"])
    assert classifier.classify(user("prove it")).pool == "big"
    assert classifier.classify(user("hi")).pool == "small"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (RulesConfig(rules=[Rule(pool="large", regex=["("])]), "bad regex"),
        (RulesConfig(rules=[Rule(pool="large")]), "no condition"),
        (RulesConfig(rules=[Rule(pool="xl", keywords=["a"])]), "pools that do not exist"),
    ],
)
def test_bad_rules_are_refused(config: RulesConfig, message: str) -> None:
    with pytest.raises(ClassifierLoadError, match=message):
        build_classifier(config, pools=POOLS)
