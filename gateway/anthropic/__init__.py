"""Anthropic's Messages API as a front door: ``POST /v1/messages`` and ``/v1/messages/count_tokens``.

A Messages request is translated at the edge into the chat completions request it means
(``request.py``), runs the gateway's one pipeline as that (keys, limits, caches, routing, fallbacks,
accounting), and its answer is translated back on the way out: a message (``answer.py``), Anthropic's
event stream (``events.py``), Anthropic's error shape (``errors.py``). ``exchange.py`` is the HTTP side
(``x-api-key``, the translated body, the translated answer).
"""
