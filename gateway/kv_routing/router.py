"""The KV-aware pick as the pick stage asks for it: which replica of a pool holds the prompt's head.

``KvRouter`` puts the parts together: the subscriber keeps the block index current, the tokenizer
cache turns a request into the engine's token ids, the index counts each candidate's leading hits
at its block size, and the scorer weighs them against load. :meth:`KvRouter.choose` answers None
whenever KV events cannot steer this call (the pool has no ``kv_routing``, none of its candidates'
events flow, the tokenizer is still loading, the prompt cannot be tokenized), and the pick stage then
falls back to prompt-prefix affinity.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gateway.kv_routing.index import BlockIndex, PromptChain
from gateway.kv_routing.scorer import Candidate, KvChoice, choose
from gateway.policy.kv_events import KvRoutingConfig
from gateway.tiers.classifier import MAX_REASON_CHARS, header_safe

if TYPE_CHECKING:
    from gateway.kv_routing.subscriber import KvEventSubscriber, SocketFactory
    from gateway.kv_routing.tokenizer import TokenizerCache

__all__ = ["MAX_REASON_CHARS", "KvRouter", "kv_route_reason"]


class KvRouter:
    """The block index, its subscriber and the tokenizers; :meth:`choose` for the pick stage.

    pyzmq, tokenizers and jinja2 (~25 MiB a worker) are imported only once a policy names an event
    source: a gateway without ``kv_routing`` never loads them.
    """

    def __init__(
        self,
        *,
        index: BlockIndex | None = None,
        tokenizers: TokenizerCache | None = None,
        socket_factory: SocketFactory | None = None,
        on_decision: Callable[[str, str], None] | None = None,
    ) -> None:
        self.index = index or BlockIndex()
        self._tokenizers = tokenizers
        self._socket_factory = socket_factory
        self.subscriber: KvEventSubscriber | None = None
        """Built by the first policy with an event source."""
        self.on_decision = on_decision
        """``(pool, outcome)`` of every KV-aware decision (``hit``, ``override``, ``miss``)."""
        self._is_running = False

    @property
    def tokenizers(self) -> TokenizerCache:
        if self._tokenizers is None:
            from gateway.kv_routing.tokenizer import TokenizerCache  # only where KV routing is on

            self._tokenizers = TokenizerCache()
        return self._tokenizers

    def update(self, config: KvRoutingConfig) -> None:
        """Follow a (re)loaded policy's event sources."""
        if self.subscriber is None:
            if not any(pool.enabled and pool.replicas for pool in config.pools.values()):
                return
            from gateway.kv_routing.subscriber import KvEventSubscriber  # only where KV routing is on

            self.subscriber = KvEventSubscriber(self.index, socket_factory=self._socket_factory)
            if self._is_running:
                self.subscriber.start()
        self.subscriber.update(config)

    def start(self) -> None:
        """Start following (the app's startup)."""
        self._is_running = True
        if self.subscriber is not None:
            self.subscriber.start()

    async def stop(self) -> None:
        """Stop following and close the sockets (the app's shutdown)."""
        self._is_running = False
        if self.subscriber is not None:
            await self.subscriber.stop()

    async def choose(
        self,
        config: KvRoutingConfig,
        pool: str,
        body: Mapping[str, Any],
        candidates: Sequence[tuple[str, float]],
        salts: Mapping[str, str | None] | None = None,
    ) -> KvChoice | None:
        """Score ``(label, load)`` candidates of ``pool`` for ``body``; None: KV events cannot steer it.

        ``salts``: the cache salt the request would carry to each replica (by label; the tenant's where
        the replica takes one): a replica's hits are the blocks it holds for that salt."""
        pool_config = config.pools.get(pool)
        if pool_config is None or not pool_config.enabled or not candidates:
            return None
        index = self.index
        sizes = {
            label: index.block_size((pool, label)) for label, _ in candidates if index.is_live((pool, label))
        }
        if not any(sizes.values()):  # no events flow for any candidate: affinity decides
            return None
        tokenizer = self.tokenizers.get(pool_config.tokenizer)
        if tokenizer is None:
            return None
        token_ids = await tokenizer.prompt_ids_off_loop(body, pool_config.max_prefix_tokens)
        if not token_ids:
            return None
        chains: dict[tuple[int, str | None], PromptChain] = {}
        scored = []
        for label, load in candidates:
            size = sizes.get(label)
            if size is None:  # no events from this one: it holds nothing we know of
                fallback = next(s for s in sizes.values() if s)
                scored.append(Candidate(label, load, 0, len(token_ids) // fallback, fallback))
                continue
            salt = salts.get(label) if salts else None
            chain = chains.get((size, salt))
            if chain is None:
                chain = chains[size, salt] = PromptChain(token_ids, size, salt)
            scored.append(Candidate(label, load, index.num_hits((pool, label), chain), len(chain), size))
        decision = choose(
            scored,
            load_tokens=pool_config.load_tokens,
            max_load_factor=pool_config.max_load_factor,
            min_load_excess=pool_config.min_load_excess,
        )
        if self.on_decision is not None:
            self.on_decision(pool, decision.outcome)
        return decision


def kv_route_reason(route_reason: str | None, kv_reason: str) -> str:
    """The pool's route reason with the KV pick's appended (``alias; kv:8/10 blocks@b``); a retry's pick
    replaces the earlier attempt's.

    The result is an HTTP header's value, as the classifier's reasons are: printable ASCII (a replica
    label may be any text), at most ``MAX_REASON_CHARS``; the pool's reason is cut to leave the KV
    pick's whole."""
    base = route_reason or ""
    base = "" if base.startswith("kv:") else base.partition("; kv:")[0]
    kv = header_safe(kv_reason)
    room = MAX_REASON_CHARS - len(kv) - 2
    return f"{base[:room]}; {kv}" if base and room > 0 else kv
