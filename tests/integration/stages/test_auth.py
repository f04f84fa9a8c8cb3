"""Keys: hashes only in the policy, 401 for bad keys, per-key model access, keys never logged."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from gateway.cli import main as cli_main
from gateway.cli.local import ensure_dev_key
from gateway.keys.hashing import hash_key, new_key
from gateway.policy import PolicyError, load_policy
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

USER_KEY = new_key()
SMALL_ONLY_KEY = new_key()
ADMIN_KEY = new_key()
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    upstream = FakeUpstream().start()
    document = fake_policy(upstream.base_url)
    document["auth"] = {"required": True}
    document["keys"] = [
        {"sha256": hash_key(USER_KEY), "tenant": "acme", "name": "user"},
        {"sha256": hash_key(SMALL_ONLY_KEY), "tenant": "acme", "name": "small-only", "pools": ["small"]},
        {"sha256": hash_key(ADMIN_KEY), "tenant": "ops", "name": "admin", "admin": True},
    ]
    path = write_policy(tmp_path_factory.mktemp("auth") / "policy.yaml", document)
    server = GatewayServer(path).start()
    yield server
    server.stop()
    upstream.stop()


def _client(gateway: GatewayServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0, timeout=10)


def test_valid_key_passes(gateway: GatewayServer) -> None:
    response = _client(gateway, USER_KEY).chat.completions.create(model="small", messages=MESSAGES)  # type: ignore[arg-type]
    assert response.choices[0].message.content


@pytest.mark.parametrize("key", ["sk-wrong", "x" * 10_000, "Bearer-ish"])
def test_unknown_or_absurd_keys_are_401(gateway: GatewayServer, key: str) -> None:
    with pytest.raises(openai.AuthenticationError) as info:
        _client(gateway, key).chat.completions.create(model="small", messages=MESSAGES)  # type: ignore[arg-type]
    assert info.value.code == "invalid_api_key"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer a b"},
        {"Authorization": ""},
    ],
)
def test_missing_or_malformed_authorization_is_401(gateway: GatewayServer, headers: dict[str, str]) -> None:
    response = httpx.post(
        gateway.url + "/v1/chat/completions", headers=headers, json={"model": "small", "messages": MESSAGES}
    )
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"


def test_a_model_the_key_may_not_use_is_model_not_found(gateway: GatewayServer) -> None:
    client = _client(gateway, SMALL_ONLY_KEY)
    assert client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="fail", messages=MESSAGES)  # type: ignore[arg-type]
    assert info.value.code == "model_not_found"
    assert {m.id for m in client.models.list().data} == {"small", "gpt-4o-mini"}
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("fail")


def test_models_need_a_key(gateway: GatewayServer) -> None:
    assert httpx.get(gateway.url + "/v1/models").status_code == 401


def test_usage_needs_an_admin_key(gateway: GatewayServer) -> None:
    user = httpx.get(gateway.url + "/v1/usage", headers={"Authorization": f"Bearer {USER_KEY}"})
    assert user.status_code == 403 and user.json()["error"]["code"] == "admin_key_required"
    admin = httpx.get(
        gateway.url + "/v1/usage?month=2026-13", headers={"Authorization": f"Bearer {ADMIN_KEY}"}
    )
    assert admin.status_code == 400
    admin = httpx.get(gateway.url + "/v1/usage", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    assert admin.status_code == 200 and "tenants" in admin.json()


def test_keys_never_reach_logs_or_metrics(gateway: GatewayServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for key in (USER_KEY, "sk-not-a-key-" + "z" * 20):
        try:
            _client(gateway, key).chat.completions.create(model="fail", messages=MESSAGES)  # type: ignore[arg-type]
        except openai.APIError:
            pass
    metrics = httpx.get(gateway.url + "/metrics").text
    for secret in (USER_KEY, "sk-not-a-key-", hash_key(USER_KEY)):
        assert secret not in caplog.text
        assert secret not in metrics


def test_policy_refuses_duplicate_hashes_and_negative_limits(tmp_path: Path) -> None:
    digest = hash_key("k")
    base = "pools:\n  s:\n    replicas: [{base_url: 'http://x', model: m}]\n"
    dup = tmp_path / "dup.yaml"
    dup.write_text(
        base + f"keys:\n  - {{sha256: {digest}, tenant: a}}\n  - {{sha256: {digest}, tenant: b}}\n"
    )
    with pytest.raises(PolicyError, match=r"keys\[1\].sha256: duplicate of keys\[0\]"):
        load_policy(dup)
    negative = tmp_path / "neg.yaml"
    negative.write_text(
        base + f"keys:\n  - {{sha256: {digest}, tenant: a, limits: {{requests_per_minute: -1}}}}\n"
    )
    with pytest.raises(PolicyError, match=r"keys\[0\].limits.requests_per_minute: expected `int` >= 0"):
        load_policy(negative)
    plaintext = tmp_path / "plain.yaml"
    plaintext.write_text(base + "keys:\n  - {sha256: sk-my-secret-key, tenant: a}\n")
    with pytest.raises(PolicyError, match=r"keys\[0\].sha256: expected `str` matching"):
        load_policy(plaintext)


def test_keys_new_prints_a_key_once_and_its_stanza(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["keys", "new", "--tenant", "acme", "--name", "ci"]) == 0
    out = capsys.readouterr().out
    key = out.split("store it now): ")[1].split()[0]
    assert key.startswith("sk-sy-") and f"sha256: {hash_key(key)}" in out and "tenant: acme" in out


def test_dev_key_is_made_once_and_only_its_hash_lands_in_the_overlay(tmp_path: Path) -> None:
    overlay, key_file = tmp_path / "local.yaml", tmp_path / "dev-key"
    key = ensure_dev_key(str(overlay), str(key_file))
    assert ensure_dev_key(str(overlay), str(key_file)) == key
    text = overlay.read_text()
    assert hash_key(key) in text and key not in text and text.count("sha256") == 1
    assert key_file.stat().st_mode & 0o077 == 0
