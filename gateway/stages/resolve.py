"""Stage: resolve the requested model name to a pool (pool names and the policy's aliases)."""

from __future__ import annotations

from gateway.errors import ModelNotFound
from gateway.pipeline import Call
from gateway.stages.auth import KeyIndexCache


class ResolveModel:
    """``model`` -> ``call.pool``; an unknown model, or one the key may not use, is OpenAI's 404."""

    name = "resolve"

    def __init__(self, keys: KeyIndexCache) -> None:
        self.keys = keys

    async def __call__(self, call: Call) -> None:
        pool = call.policy.pool_for_model(call.model)
        if pool is None:
            raise ModelNotFound.for_model(call.model)
        if call.key is not None and not self.keys.get(call.policy).may_use(call.key, call.model, pool):
            raise ModelNotFound.for_model(call.model)  # OpenAI answers the same for "no access"
        call.pool = pool
