"""The engine's OpenAI-compatible HTTP front (Litestar): ``create_app(engine, ...)``."""

from backends.serving.app import create_app

__all__ = ["create_app"]
