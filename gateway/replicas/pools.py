"""The policy's ``pools:`` section: each pool's replicas, timeouts and token prices.

In a policy YAML::

    pools:
      small:
        replicas:
          - {base_url: http://10.0.0.5:8000/v1, model: HuggingFaceTB/SmolLM2-135M-Instruct}
        timeouts: {first_byte_s: 30}
        price: {input_per_1k: 0.0001, output_per_1k: 0.0004}
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

import msgspec

__all__ = ["Pool", "PositiveSeconds", "Price", "Replica", "Timeouts"]

PositiveSeconds = Annotated[float, msgspec.Meta(gt=0)]


class Timeouts(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Upstream timeouts, in seconds."""

    connect_s: PositiveSeconds = 2.0
    """Opening a TCP connection to a replica; running out is a connect error (502, retried, a
    breaker failure), like a refused connection."""
    first_byte_s: PositiveSeconds = 60.0
    """Streams only: from sending the request to the response headers and the first event. A plain
    (non-stream) response's headers come when generation ends, so only ``total_s`` bounds it."""
    idle_s: PositiveSeconds = 30.0
    """The longest gap between two chunks of a streamed response, after the first event."""
    total_s: PositiveSeconds = 600.0
    """The whole upstream exchange, from the request's arrival; retries share it. The one bound of a
    plain response."""


class Replica(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One OpenAI-compatible server in a pool."""

    base_url: str
    """Its API root, e.g. ``http://10.0.0.5:8000/v1``; ``/chat/completions`` is appended."""
    model: str
    """The model name this replica serves; the request's ``model`` is rewritten to it."""
    api_key_env: str | None = None
    """Name of the environment variable holding its API key (never the key itself)."""
    weight: Annotated[float, msgspec.Meta(gt=0)] = 1.0
    """Relative share of traffic for weighted balancing."""
    name: str | None = None
    """A label for metrics and logs; defaults to host:port."""
    send_cache_salt: bool = False
    """Add a per-tenant ``cache_salt`` field to requests (the reference engine and vLLM honour it:
    their prefix caches then never cross tenants). Leave off for servers that reject unknown fields."""

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        parts = urlsplit(self.base_url)
        return parts.netloc


class Price(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a pool's tokens cost, in US dollars per 1,000 tokens."""

    input_per_1k: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    output_per_1k: Annotated[float, msgspec.Meta(ge=0)] = 0.0

    def cost_usd(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input_per_1k + output_tokens * self.output_per_1k) / 1000.0


class Pool(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A set of replicas serving one model size (small / medium / large, or any name)."""

    replicas: tuple[Replica, ...]
    """The servers; at least one."""
    timeouts: Timeouts | None = None
    """Overrides the policy-wide timeouts for this pool."""
    price: Price = Price()
    """Token prices, for budgets and the usage ledger."""
    description: str = ""
