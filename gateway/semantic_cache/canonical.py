"""What the semantic cache embeds and compares: a chat request in one canonical form.

Only the last user turn is compared by meaning: :func:`canonical_text` is its first
``MAX_EMBED_CHARS`` characters (the embedding model reads only its first 256 tokens). Everything
else that shapes the answer must be equal for a hit, so it goes into the request's :func:`scope`, a
hash: the system prompt and every earlier turn, whole; the rest of a longer last turn, which the
model would not see; and every request field that can change the response (``max_tokens``, ``stop``,
``logprobs``, the model...: all but the messages and the fields the exact response cache ignores).
Only plain-text conversations are answered; a request with tools, images (any non-text part),
``n`` > 1 or structured outputs is skipped (:func:`canonical_text` answers None).

Embeddings blur the very details that change an answer: MiniLM puts "5 km in miles" and "50 km in
miles" at a cosine of about 0.97. So a hit also needs matching :func:`literals`: the numbers in
order and with their sign, the names (capitalised words but common sentence openers), the negations
and the units of the text, all exactly; and no word of one text may be a word of the other with a
negating prefix ("safe" and "unsafe"). It costs a regex pass and keeps the near misses out.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

import msgspec

from gateway.cache.cache_keys import canonical_request

MAX_EMBED_CHARS = 1000
"""The last user turn's characters that are embedded: about the 256 tokens all-MiniLM-L6-v2 reads.
The rest must match exactly (it is in the scope)."""

_STRUCTURED = frozenset({"json_object", "json_schema"})
# Values that mean the field's default: a request that spells one out asks the same as one without
_DEFAULTS: dict[str, object] = {"n": 1, "logprobs": False, "top_p": 1.0, "presence_penalty": 0.0,
                                "frequency_penalty": 0.0}  # fmt: skip
_NO_DEFAULT = object()
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_SIGNS = frozenset("-\u2212")
_SIGN_WORDS = ("minus", "negative")
_NEGATING_PREFIXES = ("non-", "non", "dis", "un", "in", "im", "il", "ir")
_MIN_STEM = 3  # "unfit" negates "fit"; shorter stems ("unit", "into") are other words
_WORD = re.compile("[^\\W\\d_][\\w'\u2019-]*")
_SENTENCE_ENDS = frozenset(".!?:;\n")
_FIRST_PERSON = frozenset({"i", "i'm", "i'd", "i've", "i'll"})
_NEGATIONS = frozenset({"not", "no", "never", "none", "nor", "cannot", "without", "neither", "nothing"})
# capitalised words that open a sentence without naming anything
_OPENERS = frozenset(
    """what what's whats how how's why when where who whom whose which is are was were am can could do
    does did please tell give explain write list describe show name i i'm the a an in on at of for my
    should would will shall may might must if and but or so then also hey hi hello okay ok yes could
    translate summarize summarise compare define find make create help let let's any some this that
    these those there it it's from to with by about after before during every each convert calculate
    solve suggest recommend generate rewrite fix check now just quick quickly briefly could compose draft
    outline plan design build implement debug review proofread edit paraphrase brainstorm propose
    predict estimate answer imagine pretend consider assume identify classify analyze analyse
    evaluate rate rank sort state provide""".split()
)
_UNITS = {
    **dict.fromkeys(("km", "kilometer", "kilometers", "kilometre", "kilometres"), "km"),
    **dict.fromkeys(("m", "meter", "meters", "metre", "metres"), "m"),
    **dict.fromkeys(("cm", "centimeter", "centimeters", "centimetre", "centimetres"), "cm"),
    **dict.fromkeys(("mm", "millimeter", "millimeters", "millimetre", "millimetres"), "mm"),
    **dict.fromkeys(("mi", "mile", "miles"), "mi"),
    **dict.fromkeys(("ft", "foot", "feet"), "ft"),
    **dict.fromkeys(("in", "inch", "inches"), "in"),
    **dict.fromkeys(("kg", "kilogram", "kilograms", "kilo", "kilos"), "kg"),
    **dict.fromkeys(("g", "gram", "grams"), "g"),
    **dict.fromkeys(("lb", "lbs", "pound", "pounds"), "lb"),
    **dict.fromkeys(("oz", "ounce", "ounces"), "oz"),
    **dict.fromkeys(("l", "liter", "liters", "litre", "litres"), "l"),
    **dict.fromkeys(("gal", "gallon", "gallons"), "gal"),
    **dict.fromkeys(("c", "celsius", "centigrade"), "c"),
    **dict.fromkeys(("f", "fahrenheit"), "f"),
    **dict.fromkeys(("s", "sec", "second", "seconds"), "s"),
    **dict.fromkeys(("min", "minute", "minutes"), "min"),
    **dict.fromkeys(("h", "hr", "hour", "hours"), "h"),
    **dict.fromkeys(("day", "days"), "day"),
    **dict.fromkeys(("week", "weeks"), "week"),
    **dict.fromkeys(("month", "months"), "month"),
    **dict.fromkeys(("year", "years"), "year"),
    **dict.fromkeys(("kb", "kilobyte", "kilobytes"), "kb"),
    **dict.fromkeys(("mb", "megabyte", "megabytes"), "mb"),
    **dict.fromkeys(("gb", "gigabyte", "gigabytes"), "gb"),
    **dict.fromkeys(("dollar", "dollars", "usd"), "usd"),
    **dict.fromkeys(("euro", "euros", "eur"), "eur"),
    **dict.fromkeys(("percent", "%"), "%"),
}
# Words that are units only right after a number ("5 in", "20 c"): elsewhere they are ordinary words
_AMBIGUOUS_UNITS = frozenset({"in", "m", "g", "l", "c", "f", "s", "h", "min", "mi"})
# Time units count only with their number too: a paraphrase adds "how many minutes" freely
_TIME_UNITS = frozenset({"s", "min", "h", "day", "week", "month", "year"})
_FILLERS = ("degrees", "degree")  # "30 degrees Celsius" is 30 Celsius


def is_sampled(body: Mapping[str, Any]) -> bool:
    """Whether the request samples: temperature above 0 (OpenAI's default is 1) or top_p below 1."""
    temperature = body.get("temperature", 1.0)
    top_p = body.get("top_p", 1.0)
    if not isinstance(temperature, int | float) or temperature > 0:  # null means the default, 1
        return True
    return isinstance(top_p, int | float) and top_p < 1


def _text_of(content: Any) -> str | None:
    """A message's text; None when it holds anything but text (an image, audio, a file)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            return None
        texts.append(part["text"])
    return "\n".join(texts)


def canonical_text(body: Mapping[str, Any]) -> str | None:
    """The text to embed (the last user turn, bounded), or None when the request is not one the
    semantic cache answers."""
    turns = _turns(body)
    return None if turns is None else turns[-1][1][:MAX_EMBED_CHARS]


def scope(body: Mapping[str, Any]) -> str:
    """A hash of all that must be equal for a hit besides the last turn's meaning: the request's
    fields but the messages, the earlier turns whole and the last turn past ``MAX_EMBED_CHARS``."""
    turns = _turns(body) or []
    fields = {k: v for k, v in body.items() if k != "messages" and not _is_default(k, v)}
    last = turns[-1][1] if turns else ""
    material = msgspec.json.encode([turns[:-1], last[MAX_EMBED_CHARS:]])
    digest = hashlib.blake2b(canonical_request(fields), digest_size=12, person=b"sy-sc-scope-v2")
    digest.update(material)
    return digest.hexdigest()


def _is_default(name: str, value: object) -> bool:
    """Whether ``value`` is what the API assumes when ``name`` is absent (null always is)."""
    if value is None:
        return True
    default = _DEFAULTS.get(name, _NO_DEFAULT)
    return type(value) in (type(default), int) and value == default  # True is not n=1


def _turns(body: Mapping[str, Any]) -> list[tuple[str, str]] | None:
    """The conversation as ``(role, text)``, or None when the semantic cache does not answer it."""
    if body.get("tools") or body.get("functions") or body.get("tool_choice") not in (None, "none"):
        return None
    n = body.get("n")
    if n is not None and n != 1:
        return None
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") in _STRUCTURED:
        return None
    if body.get("modalities") not in (None, ["text"]):
        return None
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return None
    turns: list[tuple[str, str]] = []
    for message in messages:
        if not isinstance(message, dict):
            return None
        role = message.get("role")
        if role not in ("system", "developer", "user", "assistant") or message.get("tool_calls"):
            return None
        text = _text_of(message.get("content"))
        if text is None:
            return None
        turns.append(("system" if role == "developer" else role, text.strip()))
    if turns[-1][0] != "user" or not turns[-1][1]:
        return None  # a prefilled assistant turn, or nothing asked
    return turns


def literals(text: str, scope: str = "") -> str:
    """What a hit must share with ``text`` (compare with :func:`literals_match`): ``scope``; the
    numbers in order, with their sign; the names, negations and units (sorted, with repeats); and
    the text's words, for the negating prefixes."""
    found: list[str] = []
    words: set[str] = set()
    previous_end = 0
    for match in _WORD.finditer(text):
        word, start = match.group(), match.start()
        gap = text[previous_end:start]
        opens_sentence = previous_end == 0 or any(c in _SENTENCE_ENDS for c in gap)
        previous_end = match.end()
        lower = word.lower().replace("\u2019", "'")
        if len(lower) >= _MIN_STEM:
            words.add(lower)
        if lower in _NEGATIONS or lower.endswith("n't"):
            found.append("¬")
            continue
        unit = _UNITS.get(lower)
        if unit is not None:
            amount = _number_before(text, start)  # "10 kg to lb" is not "10 lb to kg"
            if amount or (lower not in _AMBIGUOUS_UNITS and unit not in _TIME_UNITS):
                found.append(f"u:{unit}@{amount}" if amount else "u:" + unit)
                continue
        if word[0].isupper() and not (opens_sentence and lower in _OPENERS) and lower not in _FIRST_PERSON:
            found.append(lower.removesuffix("'s"))  # "France's" names France
    found.sort()
    return "|".join((scope, " ".join(_numbers(text)), " ".join(found), " ".join(sorted(words))))


def literals_match(stored: str, asked: str, *, exact: bool = True) -> bool:
    """Whether an entry stored with literals ``stored`` may answer ``asked``: the same scope always;
    with ``exact``, also the same numbers, names, negations and units, and no word of one that is a
    word of the other with a negating prefix."""
    stored_head, _, stored_words = stored.rpartition("|")
    asked_head, _, asked_words = asked.rpartition("|")
    if not exact:
        return stored_head.partition("|")[0] == asked_head.partition("|")[0]
    if stored_head != asked_head:
        return False
    if stored_words == asked_words:
        return True
    one, other = set(stored_words.split()), set(asked_words.split())
    return not (_negates(one - other, other) or _negates(other - one, one))


def scope_of(literals_: str) -> str:
    """The scope that :func:`literals` put first."""
    return literals_.partition("|")[0]


def _negates(words: set[str], bare: set[str]) -> bool:
    """Whether one of ``words`` is a word of ``bare`` with a negating prefix ("unsafe", "safe")."""
    for word in words:
        for prefix in _NEGATING_PREFIXES:
            stem = word[len(prefix) :]
            if word.startswith(prefix) and len(stem) >= _MIN_STEM and stem in bare:
                return True
    return False


def _numbers(text: str) -> list[str]:
    """The numbers of ``text`` in order, a negative one with its "-" ("-40", "minus 40")."""
    found = []
    for match in _NUMBER.finditer(text):
        number = match.group().replace(",", "")
        found.append("-" + number if _is_negative(text, match.start()) else number)
    return found


def _is_negative(text: str, start: int) -> bool:
    """Whether the number at ``start`` has a minus sign ("-40", "minus 40") rather than being the
    right operand of a subtraction ("10 - 3", "10-3", "10 minus 3") or a name's ("COVID-19")."""
    before = text[:start]
    if before and before[-1] in _SIGNS:
        head = before[:-1]
        return not head or not (head[-1].isalnum() or head[-1] in ".,)")
    head = before.rstrip()
    for word in _SIGN_WORDS:
        if head.lower().endswith(word) and (len(head) == len(word) or not head[-len(word) - 1].isalnum()):
            operand = head[: -len(word)].rstrip()
            return not operand or not operand[-1].isdigit()
    return False


def _number_before(text: str, start: int) -> str:
    """The number right before the word at ``start`` ("5 in", "20C"), or ""."""
    end = start
    while end > 0 and text[end - 1] == " ":
        end -= 1
    for filler in _FILLERS:
        if text[:end].lower().endswith(filler):
            end -= len(filler)
            while end > 0 and text[end - 1] == " ":
                end -= 1
            break
    begin = end
    while begin > 0 and (text[begin - 1].isdigit() or text[begin - 1] in ".,"):
        begin -= 1
    return text[begin:end].strip(".,").replace(",", "")
