"""Personal data: each kind's true positives and the near misses it must leave alone."""

from __future__ import annotations

import pytest

from gateway.guardrails.pii import PiiDetector

DETECTOR = PiiDetector()


def found(text: str, detector: PiiDetector = DETECTOR) -> list[tuple[str, str]]:
    return [(f.kind, text[f.start : f.end]) for f in detector.find(text)]


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("write to john.doe+news@mail.example.co.uk today", "email", "john.doe+news@mail.example.co.uk"),
        ("card 4111 1111 1111 1111 expires", "card", "4111 1111 1111 1111"),
        ("card 4111-1111-1111-1111.", "card", "4111-1111-1111-1111"),
        ("amex 378282246310005", "card", "378282246310005"),
        ("call +44 20 7946 0958 now", "phone", "+44 20 7946 0958"),
        ("call +14155552671", "phone", "+14155552671"),
        ("call (555) 123-4567", "phone", "(555) 123-4567"),
        ("call 555-123-4567", "phone", "555-123-4567"),
        ("call 555.123.4567", "phone", "555.123.4567"),
        ("call 020 7946 0958", "phone", "020 7946 0958"),
        ("ssn 123-45-6789.", "national_id", "123-45-6789"),
        ("nino AB 12 34 56 C", "national_id", "AB 12 34 56 C"),
        ("nino AB123456C", "national_id", "AB123456C"),
        ("pay DE89 3704 0044 0532 0130 00 thanks", "iban", "DE89 3704 0044 0532 0130 00"),
        ("pay GB82WEST12345698765432", "iban", "GB82WEST12345698765432"),
        ("pay GB82 WEST 1234 5698 7654 32 OK", "iban", "GB82 WEST 1234 5698 7654 32"),
    ],
)
def test_true_positives(text: str, kind: str, value: str) -> None:
    assert (kind, value) in found(text)


@pytest.mark.parametrize(
    "text",
    [
        "4111 1111 1111 1112 fails Luhn",  # a 16-digit number failing Luhn is not a card
        "order 1234567812345678",
        "all zeros 0000 0000 0000 0000",
        "on 2026-12-05, 12/05/2026 or 12.05.2026 at 10:30",  # dates are not phone numbers
        "the total was 12345678 or 1,234,567.89",  # plain numbers neither
        "ssn-like 000-12-3456 and 666-12-3456 and 923-45-6789",  # never-issued SSN areas
        "nino QQ123456C and GB123456A",  # prefixes never issued
        "DE00 3704 0044 0532 0130 00",  # the IBAN's check digits fail
        "an @ sign alone, user@ and @host.com",
        "version 1.2.3 and v4111111111111111x",  # digits inside a word
        "sums: 3+4 5 6 7 8 9 and +1 234 5",  # a plus and a few digits are not a phone number
    ],
)
def test_near_misses(text: str) -> None:
    assert found(text) == []


def test_only_the_configured_kinds() -> None:
    text = "mail a@b.io card 4111111111111111"
    assert found(text, PiiDetector(("email",))) == [("email", "a@b.io")]
    assert found(text, PiiDetector(("card",))) == [("card", "4111111111111111")]


def test_non_ascii_text_keeps_the_spans() -> None:
    text = "Grüße — écrivez à zoë@exemple.fr ou appelez +33 1 23 45 67 89 ✓"
    assert ("phone", "+33 1 23 45 67 89") in found(text)
