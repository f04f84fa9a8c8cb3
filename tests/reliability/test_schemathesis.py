"""schemathesis against the gateway's own OpenAPI document (GET /openapi.json).

A real gateway on loopback, auth on, in front of the fake upstream's ``echo`` model (the ``small``
pool, the only one). Every operation of the document is fuzzed with valid and invalid data and every
schemathesis check runs on each answer: no 5xx, every status, content type and body as the document
says, invalid data refused, valid data accepted, requests without the key refused, unsupported
methods answered 405 with ``Allow``. Examples are bounded (and the seed fixed) to keep the whole
module near 30 s on two cores.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from gateway.keys.hashing import hash_key, new_key
from gateway.openapi import build_document
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

pytestmark = pytest.mark.slow

KEY = new_key()
POOL = "small"
_ADMIN = {"Authorization": f"Bearer {KEY}"}
MAX_EXAMPLES = 20
"""Generated cases per operation and mode, on top of schemathesis's coverage cases."""


@pytest.fixture(scope="module")
def gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    upstream = FakeUpstream().start()
    document = fake_policy(upstream.base_url)
    document["pools"] = {POOL: document["pools"][POOL]}  # "echo": every request it gets is answered
    document["aliases"] = {}
    document["auth"] = {"required": True}
    # the shipped classifier, every tier on the one pool: POST /v1/admin/route/explain classifies fuzzed text
    document["classifier"] = {"kind": "learned", "tier_pools": {"small": POOL, "medium": POOL, "large": POOL}}
    # an admin key reaches every route (GET /v1/usage too); no limits: a 429 would hide the rest
    document["keys"] = [{"sha256": hash_key(KEY), "tenant": "fuzz", "name": "fuzz", "admin": True}]
    # every case is also sent without its key, all from loopback: past the per-client bound those
    # would be 429s, and the check that unauthenticated calls get 401 would see them
    document["limits"] = {"unauthenticated": {"failed_auths_per_minute": None, "requests_per_minute": None}}
    path = write_policy(tmp_path_factory.mktemp("schemathesis") / "policy.yaml", document)
    server = GatewayServer(path).start()
    yield server.url
    server.stop()
    upstream.stop()


# the document the gateway serves (tests/gateway/test_openapi.py: GET /openapi.json is exactly this), loaded
# at collection: schemathesis's fixture-based loader does not run under this pytest
schema = schemathesis.openapi.from_dict(
    build_document(),
    config=schemathesis.Config.from_dict(
        {
            "seed": 20_260_101,
            "headers": _ADMIN,
            "generation": {"mode": "all", "max-examples": MAX_EXAMPLES},
            "checks": {"enabled": True},
            "cache": {"enabled": False},  # nothing written into the work tree
            # a batch file's content (JSON lines of requests) is more than its schema (a binary file)
            # can say, and a batch names a file that must exist: valid-looking ones are refused there;
            "operations": [
                {
                    "include-path-regex": "^/v1/(files|batches)$",
                    "include-method": "POST",
                    "checks": {"positive_data_acceptance": {"enabled": False}},
                },
                # a key names guardrail sets the policy must define (this one defines none): any name
                # the schema allows is refused with 400 unknown_guardrail, by design
                *(
                    {
                        "include-path-regex": "^/v1/admin/keys",
                        "include-method": method,
                        "checks": {"positive_data_acceptance": {"enabled": False}},
                    }
                    for method in ("POST", "PATCH")
                ),
            ],
        }
    ),
)


def _aim_at_the_pool(case: schemathesis.Case) -> None:
    """A valid model name goes to the pool: a random one is only ever a 404, and the pipeline behind
    routing (limits, caches, the upstream call, streaming) would go untested. Names the document
    refuses are left alone, so an invalid case stays invalid."""
    body = case.body
    if isinstance(body, dict):
        model = body.get("model")
        if isinstance(model, str) and 1 <= len(model) <= 256:
            body["model"] = POOL
        for scope in ("pools", "models"):  # a key's allowlists (the admin API) name real ones too
            names = body.get(scope)
            if isinstance(names, list) and all(isinstance(name, str) for name in names):
                body[scope] = [POOL] * len(names)


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)
def test_gateway_keeps_its_openapi_document(gateway_url: str, case: schemathesis.Case) -> None:
    _aim_at_the_pool(case)
    try:
        case.call_and_validate(base_url=gateway_url, timeout=30)
    finally:
        if case.path == "/v1/admin/drain":  # a drain fails /readyz (503) for every case after: undo it
            undone = httpx.delete(f"{gateway_url}/v1/admin/drain", headers=_ADMIN, timeout=10)
            assert undone.status_code == 200 and undone.json()["draining"] is False


def test_the_fuzzed_document_is_the_served_one(gateway_url: str) -> None:
    served = httpx.get(f"{gateway_url}/openapi.json", timeout=10)
    assert served.status_code == 200 and served.json() == schema.raw_schema
