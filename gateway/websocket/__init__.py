"""``GET /v1/ws``: streaming over a WebSocket, through the same pipeline as HTTP (docs/websocket.md).

``messages`` reads what a client sends, ``frames`` builds what it gets back, ``connection`` runs one
connection and its requests.
"""

from gateway.websocket.connection import WebSocketEndpoint

__all__ = ["WebSocketEndpoint"]
