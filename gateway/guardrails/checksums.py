"""The check digits that tell a card number or an IBAN from any other run of digits."""

from __future__ import annotations


def luhn_ok(digits: str) -> bool:
    """The Luhn check (ISO/IEC 7812) over a string of ASCII digits."""
    total = 0
    for i, char in enumerate(reversed(digits)):
        n = ord(char) - 48
        if i % 2:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


def iban_ok(iban: str) -> bool:
    """ISO 13616's mod-97 check over an IBAN without spaces: the first four characters moved to the
    end, letters as 10..35, the number mod 97 must be 1."""
    if not 15 <= len(iban) <= 34 or not iban.isascii() or not iban.isalnum():
        return False
    moved = iban[4:] + iban[:4]
    number = "".join(str(int(char, 36)) for char in moved.upper())
    return int(number) % 97 == 1


__all__ = ["iban_ok", "luhn_ok"]
