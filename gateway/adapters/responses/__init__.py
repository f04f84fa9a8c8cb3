"""The Responses API over chat completions, for replicas without their own ``/v1/responses``.

``ResponsesOverChat(inner, base_url)`` wraps a replica's adapter (``adapter.py``); ``request.py`` turns
a Responses request into a chat request, ``answer.py`` a chat completion into a ``Response`` object,
``events.py`` a chat stream into the Responses event stream. docs/gateway.md has the field mapping.
"""

from __future__ import annotations

from gateway.adapters.responses.adapter import ResponsesOverChat, ResponsesTranslator
from gateway.adapters.responses.answer import ResponseDraft
from gateway.adapters.responses.events import ResponseEvents
from gateway.adapters.responses.request import chat_request

__all__ = ["ResponseDraft", "ResponseEvents", "ResponsesOverChat", "ResponsesTranslator", "chat_request"]
