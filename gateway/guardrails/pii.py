"""Personal data by pattern: emails, phone numbers, payment cards (Luhn), IBANs (mod 97) and national
ids (US SSN, UK NINO).

Speed is the design: Python's ``re`` scans fast only for a pattern that starts with a literal; a
pattern that starts with a character class (``\\d``, ``[A-Z]``) tries every position at ~8 ns a
character, 35 us on a 1,000-token prompt, each. So the text is first mapped to its *shape* (every
digit ``0``, capital ``A``, small letter ``a``, the rest as it is: one ``str.translate``, index for
index) and the digit- and letter-led patterns run on the shape, each led by a literal ``0``, ``+``,
``(`` or ``AA``; a candidate is then checked on the text itself (its check digits, its prefixes).
Emails are found from each ``@``. The known limits are in docs/security.md#guardrails.
"""

from __future__ import annotations

import re
import string

from gateway.guardrails.checksums import iban_ok, luhn_ok
from gateway.guardrails.config import ALL_PII, PiiKind
from gateway.guardrails.findings import Finding

_SHAPE = str.maketrans(
    {
        **{ord(c): "0" for c in string.digits},
        **{ord(c): "A" for c in string.ascii_uppercase},
        **{ord(c): "a" for c in string.ascii_lowercase},
    }
)
# a digit-led candidate: its first digit has no letter or digit before it, its last none after it
_DIGIT_LED = re.compile(
    r"0(?<![Aa0_]0)(?:"
    r"(?P<ssn>00-00-0000)"  # US SSN: 123-45-6789
    r"|(?P<nanp>00[-. ]000[-. ]0000)"  # North American: 555-123-4567, 555.123.4567
    r"|(?P<card>(?:[ -]?0){12,18})"  # 13 to 19 digits, grouped by spaces or dashes or not
    r"|(?P<national>0{2,4} 0{3,4} ?0{3,4})"  # a national number with a trunk 0: 020 7946 0958
    r")(?![Aa0_])"
)
_PLUS_LED = re.compile(r"\+(?<![Aa0_]\+)0{1,3}(?:[ .-]?\(0{1,4}\))?(?:[ .-]?0){5,12}(?![Aa0_])")  # E.164
_PAREN_LED = re.compile(r"\(000\) ?000[-. ]0000(?![Aa0_])")  # (555) 123-4567
_LETTER_LED = re.compile(
    r"AA(?<![Aa0_]AA)(?:"
    r"(?P<iban>00(?: ?[A0]){11,30})"  # GB82 WEST 1234 5698 7654 32
    r"|(?P<nino> ?00 ?00 ?00 ?A)"  # UK National Insurance number: AB 12 34 56 C
    r")(?![Aa0_])"
)
_NINO = re.compile(r"[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?\d\d ?\d\d ?\d\d ?[A-D]")
_NINO_NEVER = frozenset({"BG", "GB", "NK", "KN", "TN", "NT", "ZZ"})
_EMAIL_LOCAL = re.compile(r"[A-Za-z0-9._%+-]{1,64}\Z")
_EMAIL_DOMAIN = re.compile(
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![A-Za-z0-9-])"
)


def _digits(span: str) -> str:
    return "".join(c for c in span if c.isdigit())


def _is_ssn(span: str) -> bool:
    area, group, serial = span[:3], span[4:6], span[7:]
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def _iban_span(text: str, start: int, end: int) -> int | None:
    """Where the IBAN at ``start`` ends: the candidate, or it without a trailing group or two (the
    shape cannot tell an IBAN's last group from a capitalised word after it)."""
    for _ in range(3):
        if iban_ok(text[start:end].replace(" ", "")):
            return end
        cut = text.rfind(" ", start, end)
        if cut < 0:
            return None
        end = cut
    return None


class PiiDetector:
    """Finds the configured kinds of personal data in a text."""

    def __init__(self, kinds: tuple[PiiKind, ...] = ALL_PII) -> None:
        self.kinds = frozenset(kinds)
        self._shape = bool(self.kinds & {"phone", "card", "iban", "national_id"})

    def find(self, text: str) -> list[Finding]:
        found: list[Finding] = []
        if "email" in self.kinds and "@" in text:
            self._emails(text, found)
        if self._shape:
            shape = text.translate(_SHAPE)
            kinds = self.kinds
            if "0" in shape:
                self._digit_led(text, shape, found)
            if "phone" in kinds and "+" in shape:
                for m in _PLUS_LED.finditer(shape):  # E.164: a country code and 8 to 15 digits in all
                    if 8 <= len(_digits(text[m.start() : m.end()])) <= 15:
                        found.append(Finding("phone", m.start(), m.end()))
            if "phone" in kinds and "(" in shape:
                found.extend(Finding("phone", m.start(), m.end()) for m in _PAREN_LED.finditer(shape))
            if kinds & {"iban", "national_id"}:
                self._letter_led(text, shape, found)
        return found

    def _emails(self, text: str, found: list[Finding]) -> None:
        at = text.find("@")
        while at >= 0:
            local = _EMAIL_LOCAL.search(text, max(0, at - 64), at)
            domain = _EMAIL_DOMAIN.match(text, at + 1)
            if local is not None and domain is not None:
                start = local.start()
                while start < at and text[start] == ".":
                    start += 1
                if start < at:
                    found.append(Finding("email", start, domain.end()))
            at = text.find("@", at + 1)

    def _digit_led(self, text: str, shape: str, found: list[Finding]) -> None:
        kinds = self.kinds
        for match in _DIGIT_LED.finditer(shape):
            start, end = match.span()
            span = text[start:end]
            kind = match.lastgroup
            if kind == "ssn":
                if "national_id" in kinds and _is_ssn(span):
                    found.append(Finding("national_id", start, end))
            elif kind == "card":
                digits = _digits(span)
                if "card" in kinds and len(set(digits)) > 1 and luhn_ok(digits):
                    found.append(Finding("card", start, end))
            elif kind == "nanp":
                if "phone" in kinds:
                    found.append(Finding("phone", start, end))
            elif "phone" in kinds and span[0] == "0" and 10 <= len(_digits(span)) <= 11:  # national
                found.append(Finding("phone", start, end))

    def _letter_led(self, text: str, shape: str, found: list[Finding]) -> None:
        if "0" not in shape:
            return
        for match in _LETTER_LED.finditer(shape):
            start, end = match.span()
            if match.lastgroup == "iban":
                if "iban" in self.kinds:
                    iban_end = _iban_span(text, start, end)
                    if iban_end is not None:
                        found.append(Finding("iban", start, iban_end))
            elif "national_id" in self.kinds:
                span = text[start:end]
                if _NINO.fullmatch(span) and span[:2] not in _NINO_NEVER:
                    found.append(Finding("national_id", start, end))


__all__ = ["PiiDetector"]
