"""The web console at ``GET /console`` (docs/console.md): one static page, and the admin JSON endpoints
it reads beside the existing ones (usage, keys, models, the WebSocket).

``views`` builds the endpoints' answers from the live gateway, ``routes`` serves them and the page,
``page`` assembles the page from ``static/``, ``openapi`` documents the routes.
"""

from gateway.console.routes import CONSOLE_PATH, console_routes

__all__ = ["CONSOLE_PATH", "console_routes"]
