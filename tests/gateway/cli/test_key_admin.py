"""gateway/cli/key_admin.py: ``sortyard keys`` against a served gateway; an update sends only what was
given, so a limit set at creation survives an update of another, and ``none`` removes one."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gateway.cli.parser import main
from gateway.keys.hashing import hash_key, new_key
from tools.servers.gateway_server import GatewayServer, write_policy

ADMIN = new_key()
_POOL = {"small": {"replicas": [{"base_url": "http://127.0.0.1:9/v1", "model": "m"}]}}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    keys = [{"sha256": hash_key(ADMIN), "tenant": "ops", "name": "root", "role": "admin"}]
    document = {"pools": _POOL, "keys": keys, "store": {"url_env": None}}
    path = write_policy(tmp_path_factory.mktemp("key-cli") / "policy.yaml", document)
    server = GatewayServer(path).start()
    yield server
    server.stop()


@pytest.fixture
def keys(gateway: GatewayServer, capsys: pytest.CaptureFixture[str]) -> Callable[..., dict[str, Any]]:
    """``sortyard keys VERB ARGS...`` on the gateway; its printed answer."""

    def run(verb: str, *args: str) -> dict[str, Any]:
        assert main(["keys", verb, "--url", gateway.url, "--admin-key", ADMIN, *args]) == 0
        return dict(json.loads(capsys.readouterr().out))

    return run


def test_an_update_keeps_the_limits_it_was_not_given(keys: Callable[..., dict[str, Any]]) -> None:
    keys("create", "--tenant", "team-a", "--name", "ci", "--rpm", "60", "--monthly-usd", "50")
    updated = keys("update", "ci", "--tpm", "100000", "--expires-at", "1798761600")
    assert updated["limits"] == {
        "requests_per_minute": 60,
        "tokens_per_minute": 100_000,
        "max_concurrent": None,
    }
    assert updated["budget"] == {"monthly_usd": 50} and updated["expires_at"] == 1798761600


def test_none_removes_a_limit_a_budget_or_an_expiry(keys: Callable[..., dict[str, Any]]) -> None:
    keys("create", "--tenant", "team-a", "--name", "bot", "--rpm", "60", "--tpm", "9", "--monthly-usd", "5")
    keys("update", "bot", "--expires-at", "1798761600")
    updated = keys("update", "bot", "--rpm", "none", "--monthly-usd", "none", "--expires-at", "none")
    assert updated["limits"]["requests_per_minute"] is None and updated["limits"]["tokens_per_minute"] == 9
    assert updated["budget"] is None and updated["expires_at"] is None


def test_a_limit_is_a_number_or_none(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["keys", "update", "ci", "--rpm", "lots"])
    assert "invalid int value: 'lots'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags",
    [
        ["create", "--tenant", "a", "--monthly-usd", "nan"],
        ["create", "--tenant", "a", "--monthly-usd", "inf"],
        ["create", "--tenant", "a", "--expires-at", "-1"],
        ["update", "ci", "--rpm", "-5"],
        ["update", "ci", "--max-concurrent", "-1"],
        ["rotate", "ci", "--grace-s", "nan"],
    ],
)
def test_a_number_is_finite_and_not_negative(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["keys", *flags, "--admin-key", "k"])
    assert exit_info.value.code == 2
    assert "expected a finite number >= 0" in capsys.readouterr().err


@pytest.mark.parametrize("verb", ["show", "revoke", "update", "rotate"])
@pytest.mark.parametrize("name", ["", "..", "a/b", "a b"])
def test_a_key_name_that_is_not_one_is_refused(
    verb: str, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["keys", verb, name, "--url", "http://127.0.0.1:9", "--admin-key", "k"])
    assert exit_info.value.code == 2
    assert "expected a key name" in capsys.readouterr().err


def test_a_name_is_one_quoted_path_segment(keys: Callable[..., dict[str, Any]]) -> None:
    keys("create", "--tenant", "team-b", "--name", "ci:nightly")
    assert keys("show", "ci:nightly")["name"] == "ci:nightly"
    assert [k["name"] for k in keys("list", "--tenant", "team-b")["data"]] == ["ci:nightly"]
