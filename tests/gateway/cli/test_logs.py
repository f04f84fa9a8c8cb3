"""gateway/cli/logs.py: one line format for the gateway and its uvicorn, the access log in its own file."""

from __future__ import annotations

import json
from pathlib import Path

from gateway.cli.logs import LOG_FORMAT, logging_config
from gateway.settings import Settings


def test_logging_config_gives_uvicorn_the_gateway_format_and_the_access_log_its_file(
    tmp_path: Path,
) -> None:
    access_log = tmp_path / "access.log"
    config = logging_config(Settings(log_level="warning", access_log_file=str(access_log)))
    assert config["formatters"]["line"]["format"] == LOG_FORMAT
    assert config["root"] == {"level": "WARNING", "handlers": ["stderr"]}
    assert "uvicorn" not in json.dumps(config)  # uvicorn's loggers propagate to the root's handler
    access = config["loggers"]["sortyard.access"]
    assert access["propagate"] is False and config["handlers"][access["handlers"][0]]["filename"] == str(
        access_log
    )
    assert "sortyard.access" not in logging_config(Settings())["loggers"]  # serve: standard output
    assert logging_config(Settings(log_level="loud"))["root"]["level"] == "INFO"
