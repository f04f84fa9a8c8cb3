"""Stage: resolve the requested model name to a pool (pool names and the policy's aliases)."""

from __future__ import annotations

from gateway.errors import ModelNotFound
from gateway.pipeline import Call


class ResolveModel:
    """``model`` -> ``call.pool``; an unknown model is OpenAI's 404 ``model_not_found``."""

    name = "resolve"

    async def __call__(self, call: Call) -> None:
        pool = call.policy.pool_for_model(call.model)
        if pool is None:
            raise ModelNotFound.for_model(call.model)
        call.pool = pool
