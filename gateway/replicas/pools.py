"""The policy's ``pools:`` section: each pool's replicas, timeouts and token prices.

In a policy YAML::

    pools:
      small:
        replicas:
          - {base_url: http://10.0.0.5:8000/v1, model: HuggingFaceTB/SmolLM2-135M-Instruct}
        timeouts: {first_byte_s: 30}
        price: {input_per_1k: 0.0001, output_per_1k: 0.0004}
        template_tokens: {per_message: 5, per_request: 3}   # what its chat template adds
        passthrough_routes: [/tokenize, /detokenize]         # the server's own routes, passed through
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

import msgspec

from gateway.adapters import RESPONSES_NATIVE, RESPONSES_NATIVE_ALLOWED, ChatTemplate, Kind, ResponsesMode

__all__ = [
    "GATEWAY_PATHS",
    "Pool",
    "PositiveSeconds",
    "Price",
    "Replica",
    "TemplateTokens",
    "Timeouts",
    "is_gateway_path",
]

PositiveSeconds = Annotated[float, msgspec.Meta(gt=0)]
Count = Annotated[int, msgspec.Meta(ge=0)]
RoutePath = Annotated[str, msgspec.Meta(pattern=r"^/[A-Za-z0-9._~/-]+$", max_length=256)]

GATEWAY_PATHS = frozenset(
    {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/embeddings",
        "/v1/responses",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/files",
        "/v1/batches",
        "/v1/models",
        "/v1/usage",
        "/v1/ws",
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
        "/console",
        "/console/login",
        "/console/callback",
        "/console/logout",
    }
)
"""Paths the gateway serves itself; no pass-through route may take one (nor one under ``/v1/admin/``,
``/v1/models/`` or ``/v1/responses/``)."""


def is_gateway_path(path: str) -> bool:
    """Whether the gateway serves ``path`` itself (``tests/gateway/test_openapi.py`` checks every route)."""
    return path.rstrip("/") in GATEWAY_PATHS or path.startswith(
        ("/v1/admin/", "/v1/models/", "/v1/responses/", "/v1/files/", "/v1/batches/")
    )


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
    """One inference server in a pool."""

    base_url: str
    """Its OpenAI API root, e.g. ``http://10.0.0.5:8000/v1``; ``/chat/completions`` is appended. A
    kind's native routes (TGI ``/generate``, Ollama ``/api/chat``, ...), health and load pages are at
    its server root: ``base_url`` without the ``/v1`` (``gateway.replicas.balancer.server_root``)."""
    model: str
    """The model name this replica serves; the request's ``model`` is rewritten to it."""
    api_key_env: str | None = None
    """Name of the environment variable holding its API key (never the key itself)."""
    weight: Annotated[float, msgspec.Meta(gt=0)] = 1.0
    """Relative share of traffic for weighted balancing."""
    name: str | None = None
    """A label for metrics and logs; defaults to host:port."""
    kind: Kind = "openai"
    """What server it is (``gateway.adapters``): ``openai`` (any OpenAI-compatible server), ``vllm``,
    ``sortyard`` (the reference engine), ``tgi``, ``triton``, ``ollama``, ``llamacpp``; its adapter
    speaks the server's native API where its OpenAI mode is missing or worse, and reads its health and
    load pages."""
    responses: ResponsesMode | None = None
    """How it serves the Responses API (``POST /v1/responses``): ``native`` (the server's own route,
    passed through) or ``chat`` (the gateway translates it to chat completions and back). Unset: the
    kind's default, ``native`` for ``openai`` and ``vllm``, ``chat`` for the others."""
    metrics_url: str | None = None
    """Its load page, when not the kind's path at its server root (Triton's is on its metrics port, e.g.
    ``http://10.0.0.5:8002/metrics``)."""
    chat_template: ChatTemplate = "chatml"
    """How chat messages become one prompt for a native API that takes only text (Triton's generate
    extension): ``chatml`` (SmolLM2, Qwen), ``llama3``, ``mistral`` or ``plain``."""
    region: str | None = None
    """Where it runs (``eu-west``): a pool prefers its replicas in the region nearest the request's
    origin (``routing.regions``; ``gateway.replicas.regions``)."""
    send_cache_salt: bool = False
    """Add a per-tenant ``cache_salt`` field to requests (the reference engine and vLLM honour it:
    their prefix caches then never cross tenants). Leave off for servers that reject unknown fields."""

    def __post_init__(self) -> None:
        if self.responses == "native" and self.kind not in RESPONSES_NATIVE_ALLOWED:
            raise ValueError(f"responses: a `{self.kind}` replica has no /v1/responses of its own; use chat")

    @property
    def serves_responses(self) -> bool:
        """Whether ``/v1/responses`` goes to the server as it is (else over its chat completions)."""
        if self.responses is None:
            return self.kind in RESPONSES_NATIVE
        return self.responses == "native"

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


class TemplateTokens(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a pool's chat template adds to a prompt beyond the messages' text, in tokens. The gateway
    counts it into a chat (or Responses) prompt: the tokens it reserves, and the input it bills when
    the upstream never reported usage (a stream the client cut off). The defaults are OpenAI's recipe."""

    per_message: Count = 3
    """Each message's framing: its role and the template's start and end markers."""
    per_request: Count = 3
    """Once a request: the reply's priming (``<|im_start|>assistant``), a BOS token, and the default
    system prompt some templates add to requests that have none."""


class Pool(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A set of replicas serving one model size (small / medium / large, or any name)."""

    replicas: tuple[Replica, ...]
    """The servers; at least one."""
    timeouts: Timeouts | None = None
    """Overrides the policy-wide timeouts for this pool."""
    price: Price = Price()
    """Token prices, for budgets and the usage ledger."""
    description: str = ""
    template_tokens: TemplateTokens = TemplateTokens()
    """What its replicas' chat template adds to each prompt, for the gateway's token counts."""
    passthrough_routes: tuple[RoutePath, ...] = ()
    """The replicas' own ``POST`` routes the gateway passes through (``/tokenize``, ``/detokenize``):
    served at the same path on the gateway, with a key, routed by the body's ``model``, sent to the
    replica's server root (``base_url`` without its ``/v1``) plus the path; no tokens are counted."""
    guardrails: tuple[str, ...] = ()
    """Guardrail sets (the policy's ``guardrails:``, by name) its requests and answers go through."""

    def __post_init__(self) -> None:
        taken = [path for path in self.passthrough_routes if is_gateway_path(path)]
        if taken:
            raise ValueError(f"passthrough_routes: {taken[0]} is a route of the gateway's own")
