"""What the semantic cache embeds and compares: a chat request's text in one canonical form.

The canonical text is the last user turn, whole, then the context: the system prompt and the earlier
turns, each as ``role: text`` and each cut to ``MAX_CONTEXT_CHARS``. The question comes first because
the embedding model reads only its first 256 tokens: a long system prompt must not push the question
out of the window. Only plain-text conversations are embedded; a request with tools, images (any
non-text part), ``n`` > 1 or structured outputs is skipped (:func:`canonical_text` answers None).

Embeddings blur the very details that change an answer: MiniLM puts "5 km in miles" and "50 km in
miles" at a cosine of about 0.97. So a hit also needs the same :func:`literals`: the numbers, the
names (capitalised words but common sentence openers), the negations and the units of the text, and
the same system prompt, exactly. It costs a regex pass and keeps the near misses out.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

MAX_CONTEXT_CHARS = 256
"""The system prompt and each earlier turn are cut to this many characters."""

_STRUCTURED = frozenset({"json_object", "json_schema"})
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
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
    """The text to embed, or None when the request is not one the semantic cache answers."""
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
    context = [f"{role}: {text[:MAX_CONTEXT_CHARS]}" for role, text in turns[:-1]]
    return "\n".join([turns[-1][1], *context])


def system_prompt(body: Mapping[str, Any]) -> str:
    """The system and developer messages' text, joined (empty when there are none)."""
    messages = body.get("messages") or []
    return "\n".join(
        _text_of(m.get("content")) or ""
        for m in messages
        if isinstance(m, dict) and m.get("role") in ("system", "developer")
    )


def literals(text: str, system: str = "") -> str:
    """The details a hit must share exactly, as one string: the numbers, names, negations and units
    of ``text`` (sorted, with repeats) and a hash of the system prompt."""
    found: list[str] = [n.replace(",", "") for n in _NUMBER.findall(text)]
    previous_end = 0
    for match in _WORD.finditer(text):
        word, start = match.group(), match.start()
        gap = text[previous_end:start]
        opens_sentence = previous_end == 0 or any(c in _SENTENCE_ENDS for c in gap)
        previous_end = match.end()
        lower = word.lower().replace("\u2019", "'")
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
    digest = hashlib.blake2b(system.encode(), digest_size=8).hexdigest() if system else ""
    return digest + "|" + " ".join(found)


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
