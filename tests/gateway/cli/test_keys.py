"""gateway/cli/keys.py: a key shown once, and a stanza that holds only its hash."""

from __future__ import annotations

import pytest
import yaml

from gateway.cli.keys import keys_new
from gateway.keys.hashing import hash_key


@pytest.mark.parametrize("admin", [False, True])
def test_the_stanza_pastes_under_keys_with_the_hash_only(
    admin: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    assert keys_new("acme", None, admin) == 0
    shown, _, stanza = capsys.readouterr().out.partition("Add under `keys:` in your policy:\n")
    key = shown.split("store it now): ")[1].strip()
    entry = {"sha256": hash_key(key), "tenant": "acme", **({"admin": True} if admin else {})}
    assert yaml.safe_load(stanza) == [entry]
    assert key not in stanza


def test_a_role_goes_into_the_stanza(capsys: pytest.CaptureFixture[str]) -> None:
    assert keys_new("acme", "ops", False, role="viewer") == 0
    stanza = capsys.readouterr().out.partition("Add under `keys:` in your policy:\n")[2]
    assert yaml.safe_load(stanza)[0]["role"] == "viewer"


@pytest.mark.parametrize(
    ("tenant", "name", "admin", "role", "message"),
    [
        ("bad tenant", None, False, None, "--tenant 'bad tenant'"),
        ("", None, False, None, "--tenant ''"),
        ("acme", "a/b", False, None, "--name 'a/b'"),
        ("acme", "", False, None, "--name ''"),
        ("123", None, False, None, "would not load as a policy key"),
        ("acme", None, True, "viewer", "--admin contradicts --role viewer"),
    ],
)
def test_a_stanza_the_policy_would_refuse_is_refused(
    tenant: str,
    name: str | None,
    admin: bool,
    role: str | None,
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert keys_new(tenant, name, admin, role) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ") and message in err and err.count("\n") == 1
