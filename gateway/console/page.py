"""The console's one HTML page, put together once from its package files.

``static/index.html`` holds the markup with two placeholders that receive ``static/console.css`` and
the scripts (``SCRIPTS``, joined in order) inline, so ``GET /console`` is one response with no further
request for assets and no build step. The page holds no data: what it shows comes from the admin JSON
endpoints, called with the admin key typed into it. Its Content-Security-Policy allows exactly that
inline script and style (by their SHA-256), connections to its own origin (``fetch`` and the
WebSocket), and nothing else: no other script, frame, form target or remote resource.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from importlib.resources import files

__all__ = ["SCRIPTS", "ConsolePage", "build_page"]

SCRIPTS = ("app.js", "pools.js", "explain.js", "playground.js", "keys.js", "usage.js", "policy.js")
"""The page's scripts, in the order they run (``app.js`` defines what the others use)."""
_STYLE_SLOT = "/* console.css */"
_SCRIPT_SLOT = "/* console scripts */"


@dataclass(frozen=True, slots=True)
class ConsolePage:
    """The page's bytes and the headers it is served with."""

    body: bytes
    headers: dict[str, str]


def _digest(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


def _read(name: str) -> str:
    return (files("gateway.console") / "static" / name).read_text(encoding="utf-8")


def build_page() -> ConsolePage:
    """Read the package files and assemble the page and its headers."""
    html, style = _read("index.html"), _read("console.css")
    # every tab registered, the page starts (signing in with a key kept from earlier in this browser tab)
    script = "\n".join(f"// {name}\n{_read(name)}" for name in SCRIPTS) + "\nSY.start();\n"
    if html.count(_STYLE_SLOT) != 1 or html.count(_SCRIPT_SLOT) != 1:
        raise RuntimeError("gateway/console/static/index.html must hold each placeholder once")
    body = html.replace(_STYLE_SLOT, style).replace(_SCRIPT_SLOT, script)
    policy = "; ".join(
        [
            "default-src 'none'",
            f"script-src {_digest(script)}",
            f"style-src {_digest(style)}",
            "connect-src 'self'",  # the admin endpoints and GET /v1/ws (CSP 3: 'self' covers ws: too)
            "img-src 'self' data:",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ]
    )
    headers = {
        "content-security-policy": policy,
        "cache-control": "no-cache",
        "referrer-policy": "no-referrer",
        "x-content-type-options": "nosniff",
        "x-frame-options": "DENY",
    }
    return ConsolePage(body=body.encode("utf-8"), headers=headers)
