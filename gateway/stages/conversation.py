"""Stage (Responses API only): continue a stored conversation, and store this turn.

Runs before routing, so the classifier, the token count and the limits see the real prompt. A
request naming ``previous_response_id`` gets the stored conversation (the earlier response's input
items, then its output items) put before its own ``input``; an id the tenant has no response under
is a 404 naming ``previous_response_id``. The gateway keeps the state for every replica kind: the
field never reaches a replica (a native one is sent ``store: false`` and the field dropped,
``gateway.stages.upstream``; over chat it is only echoed in the answer).
Unless the request says ``store: false``, its response is stored as it goes out
(``gateway.responses.turn.Turn``, a result filter: before the client has the JSON body or the
stream's last event, so a client continuing the conversation at once finds it).
"""

from __future__ import annotations

from gateway.errors import InvalidRequest, NotFound
from gateway.pipeline import Call, Endpoint
from gateway.responses import ResponseStore, Turn, input_items

__all__ = ["ContinueConversation"]


class ContinueConversation:
    """Expands ``previous_response_id`` and stores the response (``store``, by default)."""

    name = "conversation"
    endpoints = frozenset({Endpoint.RESPONSES})
    """The pipeline runs this stage for Responses requests only."""

    def __init__(self, store: ResponseStore) -> None:
        self.store = store

    async def __call__(self, call: Call) -> None:
        if call.endpoint is not Endpoint.RESPONSES:
            return
        body = call.body
        previous_id = body.get("previous_response_id")
        items = input_items(body.get("input"))
        if previous_id is not None:
            if not isinstance(previous_id, str):  # gateway.schemas lets only strings through
                raise InvalidRequest(
                    "previous_response_id must be a response id.", param="previous_response_id"
                )
            previous = await self.store.get(call.tenant, previous_id) if previous_id else None
            if previous is None:
                raise NotFound(f"Response with id '{previous_id}' not found.", param="previous_response_id")
            items = [*previous.conversation(), *items]
            body["input"] = items  # the whole conversation goes upstream and is counted
        if body.get("store", True) is not False:
            turn = Turn(self.store, items, previous_id)
            call.result_filters.append(turn.watch)
