"""Luhn and IBAN mod 97."""

from __future__ import annotations

from gateway.guardrails.checksums import iban_ok, luhn_ok


def test_luhn() -> None:
    assert luhn_ok("4111111111111111") and luhn_ok("378282246310005") and luhn_ok("79927398713")
    assert not luhn_ok("4111111111111112") and not luhn_ok("79927398710")


def test_iban() -> None:
    assert iban_ok("DE89370400440532013000") and iban_ok("GB82WEST12345698765432")
    assert not iban_ok("DE88370400440532013000")  # one check digit off
    assert not iban_ok("GB82WEST1234") and not iban_ok("GB82-WEST-1234-5698-7654-32")
