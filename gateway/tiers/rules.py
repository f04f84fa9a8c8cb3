"""The rules classifier: ordered, explainable conditions on size, words, turns, tools and JSON mode.

Keywords and regexes are searched in the last user message (the request being routed); token
counts are of the whole prompt. The first rule whose conditions all hold picks the pool.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection

from gateway.tiers.classifier import (
    ClassifierLoadError,
    ClassifyInput,
    PoolMap,
    PromptView,
    TierDecision,
    header_safe,
)
from gateway.tiers.config import DEFAULT_TIERS, Rule, RulesConfig

__all__ = ["RulesClassifier"]

# Keywords/regexes look at most this much of the message (head and tail): bounded time per request.
_MAX_SEARCH_CHARS = 16_000

_UNSPACED = re.compile(
    "[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]"
)
"""Letters of scripts that do not put spaces between words (Thai, Lao, Myanmar, Khmer, kana, Han) or
glue particles to them (Hangul): a keyword edge in one of them matches inside a run of letters."""

Check = Callable[[PromptView, str], str | None]
"""A compiled condition: returns a short description when it holds, else None."""


def _search_text(text: str) -> str:
    if len(text) <= _MAX_SEARCH_CHARS:
        return text
    half = _MAX_SEARCH_CHARS // 2
    return text[:half] + "\n" + text[-half:]


def _keyword_pattern(word: str) -> str:
    """A whole word or phrase, its spaces matching any run of white space. "code" misses "decode", but
    an edge in a script written without spaces needs no boundary: "代码" is found in "写一段代码"."""
    head = "" if _UNSPACED.match(word[0]) else r"(?<!\w)"
    tail = "" if _UNSPACED.match(word[-1]) else r"(?!\w)"
    body = re.escape(word).replace(r"\ ", r"\s+")
    return f"{head}(?:{body}){tail}"


def _ascii(text: str) -> str:
    """The route reason is a header: a keyword outside ASCII is named by its escapes (``\\u4ee3``)."""
    return text.encode("ascii", "backslashreplace").decode("ascii")


def _compile_rule(index: int, rule: Rule) -> list[Check]:
    checks: list[Check] = []
    lo, hi = rule.min_prompt_tokens, rule.max_prompt_tokens
    if lo is not None:
        checks.append(lambda v, _t: f"tokens>={lo}" if v.num_prompt_tokens >= lo else None)
    if hi is not None:
        checks.append(lambda v, _t: f"tokens<={hi}" if v.num_prompt_tokens <= hi else None)
    if rule.min_turns is not None:
        turns = rule.min_turns
        checks.append(lambda v, _t: f"turns>={turns}" if v.num_turns >= turns else None)
    if rule.tools is not None:
        want_tools = rule.tools
        checks.append(
            lambda v, _t: ("tools" if want_tools else "no-tools") if v.tools == want_tools else None
        )
    if rule.json_mode is not None:
        want_json = rule.json_mode
        checks.append(
            lambda v, _t: ("json" if want_json else "no-json") if v.json_mode == want_json else None
        )
    if rule.keywords:
        words = sorted((k.strip() for k in rule.keywords if k.strip()), key=len, reverse=True)
        keyword_re = re.compile("|".join(_keyword_pattern(w) for w in words), re.IGNORECASE)
        checks.append(
            lambda _v, t: f"keyword:{_ascii(m.group(0).lower())}" if (m := keyword_re.search(t)) else None
        )
    if rule.regex:
        try:
            patterns = [re.compile(p, re.IGNORECASE) for p in rule.regex]
        except re.error as exc:
            raise ClassifierLoadError(f"rules[{index}]: bad regex: {exc}") from exc

        def regex_check(_v: PromptView, t: str) -> str | None:
            for pattern in patterns:
                if pattern.search(t):
                    return f"regex:{pattern.pattern[:40]}"
            return None

        checks.append(regex_check)
    if not checks:
        raise ClassifierLoadError(
            f"rules[{index}] (pool {rule.pool!r}) has no condition; it would always match"
        )
    return checks


class RulesClassifier:
    """Picks the pool of the first matching :class:`Rule`; ``fallback_pool`` when none matches."""

    def __init__(self, config: RulesConfig, *, pools: Collection[str] | None = None) -> None:
        self.config = config
        tiers = [DEFAULT_TIERS[0]] if config.fallback_pool is None else []
        tiers += [r.pool for r in config.rules]
        self._pools = PoolMap(config, list(dict.fromkeys(tiers)), pools)
        self._rules = [(rule, _compile_rule(i, rule)) for i, rule in enumerate(config.rules)]

    def classify(self, request: ClassifyInput) -> TierDecision:
        view = PromptView.of(request)
        text = _search_text(view.text)
        for rule, checks in self._rules:
            described = []
            for check in checks:
                what = check(view, text)
                if what is None:
                    break
                described.append(what)
            else:
                label = rule.name or " ".join(described)
                return TierDecision(pool=self._pools.pool(rule.pool), reason=header_safe(f"rules {label}"))
        return TierDecision(pool=self._pools.fallback, reason="rules no-match fallback")
