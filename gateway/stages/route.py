"""Stage: route the requested model to a pool.

A pool name or an alias routes directly. The auto model (``model: "auto"``, or an alias pointing at
it) asks the policy's tier classifier (``kind: embeddings`` first awaits the prompt's vector from
its embedding pool, through the semantic cache's embedder); a conversation keeps the tier its first
turn got (shared by every gateway replica through the store) unless the policy turns stickiness
off. A model the key may not use is OpenAI's 404. The choice and its reason go to
``x-sortyard-pool`` and ``x-sortyard-route-reason``. A Responses request is classified by its
``instructions`` and ``input`` as chat messages; a pass-through route (``/tokenize``) must be one
the pool declares (404).
"""

from __future__ import annotations

import logging
from typing import Any

from gateway.cache.blobs import Blobs
from gateway.cache.config import SemanticCacheConfig
from gateway.compiled import CompiledPolicy
from gateway.errors import ModelNotFound, NotFound
from gateway.pipeline import Call, Endpoint
from gateway.responses_api import as_messages
from gateway.semantic_cache.embedder import QueryEmbedder
from gateway.semantic_cache.index import Vector
from gateway.tiers.classifier import ClassifyInput, TierDecision, conversation_key
from gateway.tiers.config import EmbeddingsConfig
from gateway.tiers.embeddings import EmbeddingsClassifier

logger = logging.getLogger("sortyard.route")
STICKY_TTL_S = 24 * 3600.0


def _messages(call: Call) -> list[Any] | None:
    """The conversation as chat messages (chat, the Responses API, a pass-through body that has them)."""
    if call.endpoint is Endpoint.RESPONSES:
        return as_messages(call.body)
    if call.endpoint is Endpoint.CHAT or call.endpoint is Endpoint.PASSTHROUGH:
        messages = call.body.get("messages")
        return messages if isinstance(messages, list) else None
    return None


def _classify_input(call: Call) -> ClassifyInput:
    body: dict[str, Any] = call.body
    messages = _messages(call)
    if messages is not None:
        text = body.get("text")  # the Responses API's {"format": {...}}
        text_format = text.get("format") if isinstance(text, dict) else None
        response_format = body.get("response_format") or text_format
        json_mode = isinstance(response_format, dict) and response_format.get("type") in (
            "json_object",
            "json_schema",
        )
        return ClassifyInput(
            messages=messages,
            tools=bool(body.get("tools")),
            json_mode=json_mode,
            num_prompt_tokens=call.num_prompt_tokens,
        )
    prompt = body.get("input") if call.endpoint is Endpoint.EMBEDDINGS else body.get("prompt")
    return ClassifyInput(
        messages=[],
        prompt=prompt if isinstance(prompt, str) else None,
        num_prompt_tokens=call.num_prompt_tokens,
    )


class RouteModel:
    """``model`` -> ``call.pool`` (and ``call.route_reason``)."""

    name = "route"

    def __init__(self, sticky: Blobs, embedder: QueryEmbedder | None = None) -> None:
        self.sticky = sticky
        self.embedder = embedder
        """Embeds prompts for ``kind: embeddings`` through a pool; None: that kind falls back."""

    async def __call__(self, call: Call) -> None:
        compiled = call.compiled
        policy = compiled.policy
        pool = policy.pool_for_model(call.model)
        if pool is None:
            raise ModelNotFound.for_model(call.model)
        if pool == policy.auto_model and compiled.classifier is not None:
            pool = await self._classify(call, compiled)
        else:
            call.route_reason = "pool" if pool == call.model else "alias"
        if call.key is not None and not compiled.keys.may_use(call.key, call.model, pool):
            raise ModelNotFound.for_model(call.model)  # OpenAI answers the same for "no access"
        if call.endpoint is Endpoint.PASSTHROUGH and call.path not in policy.pools[pool].passthrough_routes:
            raise NotFound(f"The model `{call.model}` does not serve {call.path}.", param="model")
        call.pool = pool
        call.response_headers["x-sortyard-route-reason"] = call.route_reason or ""

    async def _classify(self, call: Call, compiled: CompiledPolicy) -> str:
        policy, classifier, keys = compiled.policy, compiled.classifier, compiled.keys
        assert classifier is not None and policy.classifier is not None
        sticky_key = None
        messages = _messages(call) if call.endpoint is not Endpoint.PASSTHROUGH else None
        if policy.classifier.sticky_conversations and messages:
            conversation = conversation_key(messages, namespace=call.tenant)
            if conversation is not None:
                sticky_key = f"sy:{{t:{call.tenant}}}:tier:{conversation}"
                remembered = await self.sticky.get(sticky_key)
                if remembered is not None:
                    # "pool\nreason": a later turn keeps saying why its conversation got its tier
                    pool, _, reason = remembered.decode().partition("\n")
                    if pool in policy.pools:
                        call.route_reason = (
                            f"sticky conversation ({reason})" if reason else "sticky conversation"
                        )
                        return pool
        if isinstance(classifier, EmbeddingsClassifier):
            decision = await self._classify_by_embedding(call, classifier)
        else:
            decision = classifier.classify(_classify_input(call))
        pool = decision.pool
        if call.key is not None and not keys.may_use(call.key, call.model, pool):
            allowed = [p for p in policy.pools if keys.may_use(call.key, call.model, p)]
            if allowed:  # the classifier's choice is out of this key's reach: its nearest allowed pool
                pool = allowed[0]
        call.route_reason = (
            decision.reason if pool == decision.pool else f"{decision.reason}; key allows {pool}"
        )
        if sticky_key is not None:
            await self.sticky.set(sticky_key, f"{pool}\n{call.route_reason}".encode(), STICKY_TTL_S)
        return pool

    async def _classify_by_embedding(self, call: Call, classifier: EmbeddingsClassifier) -> TierDecision:
        """The prompt's vector comes from the classifier's pool through the gateway's own client."""
        embedder, config = self.embedder, classifier.config
        if embedder is None:
            return await classifier.classify_async(_classify_input(call), None)
        how = _vector_config(config)

        async def embed(text: str) -> Vector | None:
            return await embedder.embed(call.policy, call.tenant, how, text)

        return await classifier.classify_async(_classify_input(call), embed)


def _vector_config(config: EmbeddingsConfig) -> SemanticCacheConfig:
    """The embedder's settings (pool, model, timeout) for a classifier's config."""
    return SemanticCacheConfig(pool=config.pool, model=config.model, timeout_s=config.timeout_s)
