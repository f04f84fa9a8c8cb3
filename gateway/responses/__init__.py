"""The Responses API's state: stored responses and the conversations they continue.

``store.py``: ``ResponseStore`` (per tenant, in Redis or this process) and ``StoredResponse``;
``turn.py``: a request's input items and ``Turn``, which stores its response once it is over;
``routes.py``: ``GET`` / ``DELETE /v1/responses/{id}`` and ``GET /v1/responses/{id}/input_items``.
The wire format (usage, the event relay) is ``gateway.responses_api``; serving the API over a chat
server is ``gateway.adapters.responses``.
"""

from __future__ import annotations

from gateway.responses.store import ResponseStore, StoredResponse
from gateway.responses.turn import Turn, input_items

__all__ = ["ResponseStore", "StoredResponse", "Turn", "input_items"]
