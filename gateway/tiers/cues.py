"""Request cues: what a prompt asks for, read from its instruction with the labelling guide's words.

The labelling guide (docs/routing.md) names some tiers by the request itself. Small: greetings and
thanks, grammar and spelling fixes, rewording, short translation, extraction, sentiment and
category labels, titles and names, unit conversion, simple arithmetic. Large: proofs and
derivations, system design, threat models. :func:`request_cue` finds those requests in the
instruction (the first and last few hundred characters, where instructions sit).

The training labels use it (``data/labels.py``) and so does the featurizer
(``FeatureConfig.request_cues``): real prompts are few for several of these requests, and a cue
lets the model learn one weight per request type from all of them together instead of from the
words that happen to surround each. Cost: substring tests over at most 700 lower-cased characters,
and a regex search only where one of its words occurs (tens of microseconds at worst).
"""

from __future__ import annotations

import re

__all__ = ["CUES", "instruction", "request_cue"]

CUES: tuple[str, ...] = ("small_task", "large_task")
"""Every cue :func:`request_cue` can return."""

_HEAD_CHARS = 400
_TAIL_CHARS = 300
_MAX_SMALL_CHARS = 3000  # "a long paragraph to shorten is small"; a long document to rework is not
_MAX_CHIT_CHAT_CHARS = 80
_MAX_ARITHMETIC_CHARS = 60

_LANGUAGES = (
    "english|french|german|spanish|italian|portuguese|russian|chinese|mandarin|japanese|korean|arabic|"
    "hindi|vietnamese|turkish|dutch|polish|swedish|ukrainian|persian|hebrew|greek|latin|bulgarian|"
    "indonesian|thai|shakespearean|modern english|plain english"
)
_LARGE_TASK = re.compile(
    r"\b(prove|proof|derive|derivation|theorem)\b|"
    r"\b(design|architect)\b[^.?!\n]{0,60}\b(system|service|platform|architecture|infrastructure|backend)s?\b|"
    r"\bthreat model",
)
# Small tasks, each written as a request (so "wrapped in <<title>>" or "translation vector" do not count).
_SMALL_TASK = re.compile(
    r"\b(check|fix|correct|proofread|edit|improve)\b[^.?!\n]{0,60}\b(grammar|grammatical|spelling|typos?)\b|"
    r"\bgrammatically correct\b|\bproofread\b|\bgrammar check\b|\bcheck grammar\b|"
    rf"\btranslate\b[^.?!\n]{{0,80}}\b(into|to|in) ({_LANGUAGES})\b|\btranslation (of|for)\b|"
    r"\b(rewrite|re-write|rephrase|paraphrase|reword|shorten)\b(?! (the|your) (answer|response))|"
    r"\bextract (the |all |every |each )?(names?|dates?|emails?|entities|keywords?|information|fields?|"
    r"numbers|phone numbers|addresses|key points)\b|"
    r"\b(is the sentiment|sentiment of|classify (the|this|these|each|following)|"
    r"categori[sz]e (the|this|these|each|following))\b|"
    r"\b(finish|complete) (the|this) sentence\b|"
    r"\b(suggest|give|write|create|propose|come up with|generate)\b[^.?!\n]{0,40}"
    r"\b(title|headline|slogan|caption|tagline)s?\b(?! (wrapped|in double|case))|"
    r"\bnames? for (a|an|my|the|our)\b|"
    r"\bconvert [\d.,]+ ?[a-z°]+ (to|into) [a-z°]+",
)
# A long piece of writing is medium even when it is a rewrite or a translation.
_LONG_OUTPUT = re.compile(
    r"\b(essay|story|article|blog|report|chapter|script|speech|"
    r"(at least|more than|over|minimum of) \d{3,} words|\d{3,}\+? words)\b",
)
# A request about code is never a small task, whatever words it uses ("extract the text in Python").
_CODE_REQUEST = re.compile(
    r"\b(code|script|function|program|regex|sql|python|javascript|bash|c\+\+|java)\b|```"
)
_CHIT_CHAT = re.compile(
    r"^\W*(hi|hello|hey|hiya|good (morning|afternoon|evening|night)|thanks|thank you|bye|goodbye)\b"
)
# Simple arithmetic: a short expression of numbers and operators, perhaps after "what is".
_ARITHMETIC = re.compile(
    r"^\W*((what is|what's|calculate|compute|how much is)\s+)?"
    r"[\d.,\s()]+([-+*/x\u00d7\u00f7][\d.,\s()]+)+[?=.!\s]*$"
)
# Substrings one of which every match of the pattern contains: a cheap test before the regex.
_LARGE_STEMS = ("prov", "proof", "deriv", "theorem", "design", "architect", "threat model")
_SMALL_STEMS = (
    "gramma", "spelling", "typo", "proofread", "translat", "rewrite", "re-write", "rephrase", "paraphrase",
    "reword", "shorten", "extract", "sentiment", "classify", "categori", "sentence", "title", "headline",
    "slogan", "caption", "tagline", "name", "convert",
)  # fmt: skip


def instruction(text: str) -> str:
    """Where instructions sit: the head and the tail of the prompt."""
    if len(text) <= _HEAD_CHARS + _TAIL_CHARS:
        return text
    return text[:_HEAD_CHARS] + "\n" + text[-_TAIL_CHARS:]


def _mentions(text: str, stems: tuple[str, ...]) -> bool:
    return any(stem in text for stem in stems)


def request_cue(text: str) -> str | None:
    """``"large_task"``, ``"small_task"`` or None: what the request asks for, when the guide names it."""
    head_tail = instruction(text).lower()  # patterns are lower case: no IGNORECASE, which is slow
    if _mentions(head_tail, _LARGE_STEMS) and _LARGE_TASK.search(head_tail):
        return "large_task"
    if len(text) <= _MAX_CHIT_CHAT_CHARS and _CHIT_CHAT.search(head_tail):
        return "small_task"  # greetings and thanks
    if len(text) <= _MAX_ARITHMETIC_CHARS and _ARITHMETIC.search(head_tail):
        return "small_task"  # simple arithmetic
    if (
        len(text) <= _MAX_SMALL_CHARS
        and _mentions(head_tail, _SMALL_STEMS)
        and _SMALL_TASK.search(head_tail)
        and not _LONG_OUTPUT.search(head_tail)
        and not _CODE_REQUEST.search(head_tail)
    ):
        return "small_task"
    return None
