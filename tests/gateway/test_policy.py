"""Policy parsing: typed, frozen, and errors that say file, path and what was expected."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from gateway.cli import main as cli_main
from gateway.policy import Policy, PolicyError, load_policy, merge

REPO = Path(__file__).resolve().parents[2]
ALL_POLICIES = sorted([REPO / "policies" / "default.yaml", *(REPO / "policies" / "examples").glob("*.yaml")])


@pytest.mark.parametrize("path", ALL_POLICIES, ids=lambda p: p.name)
def test_every_shipped_policy_loads(path: Path) -> None:
    policy = load_policy(path)
    assert isinstance(policy, Policy) and policy.pools


def test_default_policy_shape() -> None:
    policy = load_policy(REPO / "policies" / "default.yaml")
    assert {"small", "medium", "large"} <= set(policy.pools)
    assert policy.pool_for_model("gpt-4o-mini") == "small"
    assert policy.pool_for_model("large") == "large"
    assert policy.pool_for_model("nope") is None
    with pytest.raises(
        msgspec.structs.FrozenInstanceError
        if hasattr(msgspec.structs, "FrozenInstanceError")
        else AttributeError
    ):
        policy.version = 1  # type: ignore[misc]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "pools:\n  large:\n    replicas:\n      - {base_url: 'ftp://x', model: m}\n",
            "pools.large.replicas[0].base_url: expected an http(s) URL",
        ),
        (
            "pools:\n  large:\n    replicas:\n      - {base_url: 5, model: m}\n",
            "pools.large.replicas[0].base_url: expected `str`, got `int`",
        ),
        ("pools:\n  large:\n    replicas:\n      - {model: m}\n", "object missing required field `base_url`"),
        (
            "pools:\n  s:\n    replicas: [{base_url: 'http://x', model: m, weight: -1}]\n",
            "pools.s.replicas[0].weight: expected `float` > 0",
        ),
        (
            "pools:\n  s:\n    replicas: [{base_url: 'http://x', model: m}]\naliases: {a: nope}\n",
            "aliases.a: expected one of the pools (s), got 'nope'",
        ),
        (
            "pools:\n  s:\n    replicas: [{base_url: 'http://x', model: m}]\ntimeouts: {connect_s: 0}\n",
            "timeouts.connect_s: expected `float` > 0",
        ),
        (
            "pools:\n  s:\n    replicas: [{base_url: 'http://x', model: m}]\nsurprise: 1\n",
            "object contains unknown field `surprise`",
        ),
        (  # the key's name is one segment of /v1/admin/keys/{name}: a slash would put it out of reach
            "pools:\n  s:\n    replicas: [{base_url: 'http://x', model: m}]\n"
            "keys: [{sha256: '" + "0" * 64 + "', tenant: t, name: team/bot}]\n",
            "keys[0].name: expected `str` matching regex",
        ),
        (  # a port that cannot exist: every request was a 502
            "pools:\n  s:\n    replicas: [{base_url: 'http://127.0.0.1:99999/v1', model: m}]\n",
            "pools.s.replicas[0].base_url: expected a port from 1 to 65535",
        ),
        (  # the gateway appends paths: every request was a 404
            "pools:\n  s:\n    replicas: [{base_url: 'http://127.0.0.1:8701/v1?x=1', model: m}]\n",
            "pools.s.replicas[0].base_url: expected no query or fragment",
        ),
        (
            "pools:\n  s:\n    replicas: [{base_url: 'http://x/v1', model: m, metrics_url: 'nota url'}]\n",
            "pools.s.replicas[0].metrics_url: expected an http(s) URL",
        ),
        (  # a fail_closed webhook that is no URL blocked every request
            "pools:\n  s:\n    replicas: [{base_url: 'http://x/v1', model: m}]\n"
            "guardrails: {g: {webhook: {url: 'not a url', on_error: fail_closed}}}\n",
            "guardrails.g.webhook.url: expected an http(s) URL",
        ),
        (
            "pools:\n  s:\n    replicas: [{base_url: 'http://x', model: m}]\npools: {}\n",
            "found the key 'pools' twice",
        ),
        (
            "pools:\n  s:\n    replicas: [{base_url: 'http://x/v1', model: m}]\n"
            "sso: {issuer: 'not a url', client_id: c, algorithms: []}\n",
            "sso.issuer: expected an http(s) URL",
        ),
        (
            "pools:\n  s:\n    replicas: [{base_url: 'http://x/v1', model: m}]\n"
            "sso: {issuer: 'https://idp.example', client_id: c, algorithms: []}\n",
            "sso.algorithms: expected at least one",
        ),
        (
            "version: 2\npools:\n  s:\n    replicas: [{base_url: 'http://x/v1', model: m}]\n",
            "version: invalid enum value 2",
        ),
        ("pools: {}\n", "pools: expected at least one pool"),
        ("- a list\n", "expected a mapping at the top level"),
        ("pools: [\n", "invalid YAML"),
    ],
)
def test_errors_name_file_path_and_expectation(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert str(path) in str(info.value)
    assert message in str(info.value)


def test_an_error_from_the_overlay_says_it_was_merged(tmp_path: Path) -> None:
    """The paths are the merged document's: without a word about the overlay, the error blamed the base
    file for a value only the overlay held."""
    base = _write(tmp_path, "pools:\n  s:\n    replicas: [{base_url: 'http://x', model: m}]\n")
    overlay = tmp_path / "local.yaml"
    overlay.write_text("pools: {s: 5}\n")
    with pytest.raises(PolicyError, match=rf"with the overlay {overlay} merged on top"):
        load_policy(base, overlay)


def test_overlay_merges_on_top(tmp_path: Path) -> None:
    base = _write(tmp_path, "pools:\n  s:\n    replicas: [{base_url: 'http://x', model: m}]\n")
    overlay = tmp_path / "local.yaml"
    overlay.write_text("aliases: {dev: s}\nlimits: {max_body_bytes: 10}\n")
    policy = load_policy(base, overlay)
    assert policy.pool_for_model("dev") == "s" and policy.limits.max_body_bytes == 10
    assert load_policy(base, tmp_path / "absent.yaml").aliases == {}
    assert merge({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}}) == {"a": {"b": 1, "c": 3}}


def test_policy_check_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["policy", "check", str(REPO / "policies" / "default.yaml")]) == 0
    assert "ok (5 pools" in capsys.readouterr().out
    bad = _write(tmp_path, "pools:\n  large:\n    replicas:\n      - {base_url: 'nope', model: m}\n")
    assert cli_main(["policy", "check", str(bad)]) == 1
    assert "pools.large.replicas[0].base_url: expected an http(s) URL" in capsys.readouterr().err


def test_keys_and_tenants_carry_scheduling_priorities(tmp_path: Path) -> None:
    policy = load_policy(REPO / "policies" / "examples" / "keys-and-limits.yaml")
    keys = {key.key_id: key for key in policy.keys}
    assert policy.priority_for(keys["acme-ci"], "acme") == 10  # the key's own
    assert policy.priority_for(keys["acme-batch"], "acme") == 0  # its tenant's
    assert policy.priority_for(None, "acme") == 0
    assert policy.priority_for(keys["ops-admin"], "ops") is None  # none at all: none is sent
    assert keys["acme-batch"].allow_client_priority and not keys["acme-ci"].allow_client_priority
    key = "{sha256: " + "a" * 64 + ", tenant: a, priority: high}"
    text = f"pools:\n  s:\n    replicas: [{{base_url: 'http://x', model: m}}]\nkeys: [{key}]\n"
    with pytest.raises(PolicyError, match=r"keys\[0\].priority: expected `int \| null`, got `str`"):
        load_policy(_write(tmp_path, text))


@pytest.mark.parametrize(
    ("routes", "message"),
    [
        ("[/v1/models]", "pools.s.passthrough_routes: /v1/models is a route of the gateway's own"),
        ("[/v1/admin/keys]", "pools.s.passthrough_routes: /v1/admin/keys is a route of the gateway's own"),
        ("[tokenize]", "pools.s.passthrough_routes[0]: expected `str` matching regex"),
    ],
)
def test_passthrough_routes_are_paths_the_gateway_does_not_serve_itself(
    tmp_path: Path, routes: str, message: str
) -> None:
    head = "pools:\n  s:\n    replicas: [{base_url: 'http://x', model: m}]\n"
    text = f"{head}    passthrough_routes: {routes}\n"
    with pytest.raises(PolicyError) as info:
        load_policy(_write(tmp_path, text))
    assert message in str(info.value)
    good = text.replace(routes, "[/tokenize, /detokenize]") + "    template_tokens: {per_message: 5}\n"
    pool = load_policy(_write(tmp_path, good)).pools["s"]
    assert pool.passthrough_routes == ("/tokenize", "/detokenize")
    assert (pool.template_tokens.per_message, pool.template_tokens.per_request) == (5, 3)
