"""The gateway's logging: one line format for the gateway, its uvicorn and the reference engine, and the
access log in its own file when one is set."""

from __future__ import annotations

import logging
import logging.config
from pathlib import Path
from typing import Any

from gateway.settings import Settings
from gateway.telemetry.access_log import LOGGER_NAME as ACCESS_LOGGER

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""The one line format of the gateway, its uvicorn and (``backends/server.py``) the reference engine."""


def logging_config(settings: Settings) -> dict[str, Any]:
    """The gateway's logging, for ``logging.config.dictConfig``: every line in :data:`LOG_FORMAT` on
    standard error, and the access log in ``settings.access_log_file`` when one is set.

    uvicorn gets it as ``log_config`` (its own default has colours and another format), and each
    worker process applies it again.
    """
    level = settings.log_level.upper()
    if not isinstance(logging.getLevelName(level), int):
        level = "INFO"
    handlers: dict[str, Any] = {
        "stderr": {"class": "logging.StreamHandler", "formatter": "line", "stream": "ext://sys.stderr"}
    }
    # client libraries log every request at INFO: a real cost on the hot path
    loggers: dict[str, Any] = {name: {"level": "WARNING"} for name in ("httpx", "httpcore", "aiohttp.access")}
    if settings.access_log_file:
        handlers["access"] = {
            "class": "logging.FileHandler",
            "filename": settings.access_log_file,
            "formatter": "bare",
            "delay": True,
        }
        loggers[ACCESS_LOGGER] = {"level": "INFO", "handlers": ["access"], "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"line": {"format": LOG_FORMAT}, "bare": {"format": "%(message)s"}},
        "handlers": handlers,
        "loggers": loggers,
        "root": {"level": level, "handlers": ["stderr"]},
    }


def configure_logging(settings: Settings) -> None:
    """Apply :func:`logging_config` in this process, making the access log's folder first."""
    if settings.access_log_file:
        Path(settings.access_log_file).parent.mkdir(parents=True, exist_ok=True)
    logging.config.dictConfig(logging_config(settings))
