"""The console in a real browser, signed in with each role: it shows what the role may do, and only that.

A tenant-admin sees its keys and usage (its own tenant's, and nothing it may not read is even asked
for); an operator reloads the policy and drains the gateway from the page; a viewer reads but is
offered neither. As ``test_console.py``: Playwright drives Debian's Chromium against a real gateway in
front of the fake upstream, and every wait is for a condition on the page. This gateway looks at its
policy file once an hour only, so the policy the test rewrites is read when the page's button asks.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.keys.hashing import hash_key, new_key
from tests.support.browser import ARTIFACTS, chromium
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

pytestmark = pytest.mark.slow

KEYS = {name: new_key() for name in ("root", "ops-bot", "watcher", "acme-lead", "acme-app", "globex-app")}
ROLES = {"root": "admin", "ops-bot": "operator", "watcher": "viewer", "acme-lead": "tenant-admin"}
TENANTS = {"root": "ops", "ops-bot": "ops", "watcher": "ops", "acme-lead": "acme", "acme-app": "acme"}
READER_TABS = ["Pools", "Route explain", "Playground", "Usage", "Policy"]
SHOTS = ARTIFACTS / "console"
TIMEOUT_MS = 20_000


def _policy(base_url: str, **pools: Any) -> dict[str, Any]:
    document = fake_policy(base_url)
    echo = document["pools"]["small"]
    document["pools"] = {"small": echo, "medium": echo, **pools}
    document["aliases"] = {}
    document["auth"] = {"required": True}
    document["keys"] = [
        {"sha256": hash_key(secret), "tenant": TENANTS.get(name, "globex"), "name": name}
        | ({"role": ROLES[name]} if name in ROLES else {})
        for name, secret in KEYS.items()
    ]
    return document


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    server = FakeUpstream().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory: pytest.TempPathFactory, upstream: FakeUpstream) -> Path:
    return write_policy(tmp_path_factory.mktemp("console-roles") / "policy.yaml", _policy(upstream.base_url))


@pytest.fixture(scope="module")
def gateway(policy_file: Path) -> Iterator[GatewayServer]:
    server = GatewayServer(policy_file, settings={"reload_interval_s": 3600}).start()  # the button reloads
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from chromium()


@pytest.fixture
def page(browser: Any, gateway: GatewayServer) -> Iterator[Any]:
    """A fresh tab on /console, not signed in; a script error or a refused admin call fails the test."""
    from playwright.sync_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    context = browser.new_context(timezone_id="UTC", viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.on("response", lambda r: errors.append(f"{r.status} {r.url}") if r.status in (401, 403) else None)
    tab.goto(gateway.url + "/console")
    yield tab
    context.close()
    assert errors == []


def _sign_in(page: Any, name: str) -> None:
    from playwright.sync_api import expect

    page.fill("#admin-key", KEYS[name])
    page.click("#signin-button")
    expect(page.locator("#tabs")).to_be_visible()


def _chat(gateway: GatewayServer, name: str) -> int:
    body = {"model": "small", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Authorization": f"Bearer {KEYS[name]}"}
    return httpx.post(gateway.url + "/v1/chat/completions", json=body, headers=headers).status_code


def _shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_a_tenant_admin_sees_its_own_keys_and_usage_only(page: Any, gateway: GatewayServer) -> None:
    from playwright.sync_api import expect

    assert _chat(gateway, "acme-app") == 200 and _chat(gateway, "globex-app") == 200
    gateway.settle()
    _sign_in(page, "acme-lead")
    expect(page.locator("#session-label")).to_have_text("acme-lead · tenant-admin (acme)")
    expect(page.locator("#tabs button:visible")).to_have_text(["Keys", "Usage"])
    expect(page.locator("#tabs button.active")).to_have_text("Keys")  # the first tab it may use
    expect(page.locator('#keys-table tr[data-key="acme-app"]')).to_be_visible()
    expect(page.locator("#keys-table tbody tr")).to_have_count(2)  # acme-app and acme-lead, no other tenant
    assert sorted(page.locator("#keys-table td.name").all_inner_texts()) == ["acme-app", "acme-lead"]
    expect(page.locator("#audit-table")).to_be_hidden()  # the audit trail is the admin's
    expect(page.locator("#key-admin-label")).to_be_hidden()
    expect(page.locator("#key-tenant")).to_have_value("acme")
    page.fill("#key-name", "acme-ci")
    page.click("#key-create")  # made in its own tenant, filled in for it
    expect(page.locator('#keys-table tr[data-key="acme-ci"] td.status')).to_have_text("active")
    expect(page.locator("#key-secret-value")).to_have_text(re.compile(r"^sk-"))
    page.click("#key-secret-dismiss")
    expect(page.locator("#key-tenant")).to_have_value("acme")  # still, after the form was cleared
    _shot(page, "tenant-admin-keys")

    page.click('#tabs button[data-tab="usage"]')
    expect(page.locator('#usage-svg g[data-tenant="acme"]')).to_be_visible()
    expect(page.locator("#usage-svg g.tenant")).to_have_count(1)
    expect(page.locator("#usage-error")).to_be_hidden()
    _shot(page, "tenant-admin-usage")


def test_an_operator_reloads_the_policy_and_drains_the_gateway(
    page: Any, gateway: GatewayServer, policy_file: Path, upstream: FakeUpstream
) -> None:
    from playwright.sync_api import expect

    _sign_in(page, "ops-bot")
    expect(page.locator("#session-label")).to_have_text("ops-bot · operator")
    expect(page.locator("#tabs button:visible")).to_have_text(READER_TABS)
    expect(page.locator("#pools-list .pool-name")).to_have_text(["small", "medium"])
    toggle = page.locator("#drain-toggle")
    expect(toggle).to_have_text("Drain this gateway")
    expect(page.locator("#drain-state")).to_have_text("Serving")
    toggle.click()
    expect(page.locator("#drain-state")).to_contain_text("Draining")
    expect(page.locator("#drain-state")).to_contain_text("0 in flight")
    expect(toggle).to_have_text("Resume")
    assert httpx.get(gateway.url + "/readyz").json()["status"] == "draining"
    _shot(page, "operator-draining")
    toggle.click()
    expect(toggle).to_have_text("Drain this gateway")
    expect(page.locator("#drain-state")).to_contain_text("Serving")
    assert httpx.get(gateway.url + "/readyz").json()["status"] != "draining"

    page.click('#tabs button[data-tab="policy"]')
    expect(page.locator("#policy-reloads")).to_contain_text("refused since start")
    extra = {"replicas": [{"base_url": upstream.base_url, "model": "echo"}]}
    write_policy(policy_file, _policy(upstream.base_url, extra=extra))
    page.click("#policy-reload")
    result = page.locator("#policy-reload-result")
    expect(result).to_contain_text("Adopted")
    expect(result).to_contain_text("pools added extra")
    expect(page.locator("#policy-json")).to_contain_text('"extra"')
    expect(page.locator("#policy-reload-error")).to_be_hidden()
    _shot(page, "operator-reloaded")

    policy_file.write_text("pools: not-a-mapping\n")  # refused: the policy serving stays
    try:
        page.click("#policy-reload")
        expect(page.locator("#policy-reload-error")).to_contain_text("Refused")
        expect(result).to_be_hidden()
        expect(page.locator("#policy-json")).to_contain_text('"extra"')
    finally:
        write_policy(policy_file, _policy(upstream.base_url, extra=extra))


def test_a_viewer_reads_but_may_not_reload_nor_drain(page: Any) -> None:
    from playwright.sync_api import expect

    _sign_in(page, "acme-lead")  # first someone else: signing out forgets their tabs
    expect(page.locator("#tabs button.active")).to_have_text("Keys")
    page.click("#signout")
    expect(page.locator("#signin")).to_be_visible()
    expect(page.locator("#session-label")).to_have_text("")

    _sign_in(page, "watcher")
    expect(page.locator("#session-label")).to_have_text("watcher · viewer")
    expect(page.locator("#tabs button:visible")).to_have_text(READER_TABS)
    expect(page.locator("#tabs button.active")).to_have_text("Pools")
    expect(page.locator("#pools-list .pool-name").first).to_be_visible()
    expect(page.locator("#drain")).to_be_hidden()
    page.click('#tabs button[data-tab="policy"]')
    expect(page.locator("#policy-json")).to_contain_text('"small"')
    expect(page.locator("#policy-reload")).to_be_hidden()
    expect(page.locator("#tab-keys")).to_be_hidden()
