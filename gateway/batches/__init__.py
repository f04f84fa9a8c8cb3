"""OpenAI's Files and Batch APIs: offline work (evaluations, backfills) run through the gateway's own
pipeline in the lowest priority class, filling idle capacity ([batches.md](../../docs/batches.md)).

``feature.BatchFeature`` puts them together: ``routes`` (``/v1/files``, ``/v1/batches``), ``service``
(upload, create, cancel, finalize), ``runner`` (claims lines and runs each as a request of
``gateway.lifecycle.live`` through ``exchange.BatchExchange``), ``state`` / ``redis_state`` (memory or
the shared Redis), ``files`` (bytes on disk), ``jsonl`` (the line format), ``records`` (the wire
objects). The policy's ``batches:`` section is ``gateway.policy.batches``.
"""

from gateway.batches.exchange import BatchExchange, batch_priority
from gateway.batches.feature import BatchFeature, build_batch_state
from gateway.batches.routes import batch_routes
from gateway.batches.runner import BatchRunner
from gateway.batches.service import BatchService

__all__ = [
    "BatchExchange",
    "BatchFeature",
    "BatchRunner",
    "BatchService",
    "batch_priority",
    "batch_routes",
    "build_batch_state",
]
