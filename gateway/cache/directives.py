"""What the client asked of the cache, from its ``Cache-Control`` request header.

- ``no-cache``: do not answer from the cache (the fresh response may still be stored);
- ``no-store``: neither answer from nor store into the cache.

Either way the response says ``x-sortyard-cache: bypass``; otherwise ``hit`` or ``miss``.
"""

from __future__ import annotations

from dataclasses import dataclass

CACHE_HEADER = "x-sortyard-cache"
"""The response header that tells the client what the cache did."""
HIT, MISS, BYPASS = "hit", "miss", "bypass"


@dataclass(frozen=True, slots=True)
class Directives:
    """May this request read from, and may its response be written to, the cache."""

    may_read: bool = True
    may_store: bool = True

    @property
    def is_bypass(self) -> bool:
        return not self.may_read


_DEFAULT = Directives()


def read_directives(cache_control: str | None) -> Directives:
    """Parse a ``Cache-Control`` request header value (None when absent)."""
    if not cache_control:
        return _DEFAULT
    tokens = {part.split("=", 1)[0].strip().lower() for part in cache_control.split(",")}
    if "no-store" in tokens:
        return Directives(may_read=False, may_store=False)
    if "no-cache" in tokens:
        return Directives(may_read=False, may_store=True)
    return _DEFAULT
