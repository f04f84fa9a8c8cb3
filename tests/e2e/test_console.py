"""The console in a real browser: Playwright drives Debian's Chromium against a real gateway on loopback in
front of the fake upstream. Each test works one tab as an admin would and asserts what the page shows;
every wait is for a condition on the page (Playwright's ``expect``), never a guessed sleep. A screenshot
of each tab is kept in ``tests/artifacts/console/`` (git-ignored; ``SORTYARD_ARTIFACTS_DIR`` moves it).
"""

from __future__ import annotations

import re
import time
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

ADMIN = new_key()
USER = new_key()
ACME = new_key()
PROMPT = "Prove that there are infinitely many primes."
ANSWER = "Hello from the fake upstream."  # what the fake's echo model streams
SHOTS = ARTIFACTS / "console"
TIMEOUT_MS = 20_000  # a condition that never comes fails after this (a loaded 2-core machine is slow)


def _policy(base_url: str) -> dict[str, Any]:
    document = fake_policy(base_url)
    echo, down = document["pools"]["small"], document["pools"]["down"]
    document["pools"] = {
        "small": {**echo, "price": {"input_per_1k": 1.0, "output_per_1k": 2.0}},
        "medium": echo,
        "large": echo,
        "down": down,
    }
    document["aliases"] = {}
    document["auth"] = {"required": True}
    document["keys"] = [
        {"sha256": hash_key(ADMIN), "tenant": "ops", "name": "root", "admin": True},
        {"sha256": hash_key(USER), "tenant": "team-a", "name": "user"},
        {"sha256": hash_key(ACME), "tenant": "acme", "name": "acme-app"},
    ]
    document["classifier"] = {"kind": "learned"}
    document["routing"] = {  # one refused connect opens the down pool's breaker; no probe closes it
        "health": {"probe_interval_s": 0},
        "pools": {"down": {"breaker": {"failure_threshold": 1, "open_s": 600}}},
    }
    return document


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    upstream = FakeUpstream().start()
    path = write_policy(tmp_path_factory.mktemp("console") / "policy.yaml", _policy(upstream.base_url))
    server = GatewayServer(path).start()
    yield server
    server.stop()
    upstream.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from chromium()


@pytest.fixture
def page(browser: Any, gateway: GatewayServer) -> Iterator[Any]:
    """A fresh tab on /console, signed in with the admin key (UTC, so times read as the test writes them)."""
    from playwright.sync_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    context = browser.new_context(timezone_id="UTC", viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))  # a script error fails the test
    tab.goto(gateway.url + "/console")
    tab.fill("#admin-key", ADMIN)
    tab.click("#signin-button")
    expect(tab.locator("#tabs")).to_be_visible()
    yield tab
    context.close()
    assert errors == []


def _chat(gateway: GatewayServer, key: str, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    return httpx.post(
        gateway.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
    )


def _shot(page: Any, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 0
    return path


def test_a_key_without_a_role_is_refused(browser: Any, gateway: GatewayServer) -> None:
    from playwright.sync_api import expect

    context = browser.new_context()
    page = context.new_page()
    page.goto(gateway.url + "/console")
    expect(page.locator("h1")).to_contain_text("Sortyard")
    page.fill("#admin-key", USER)
    page.click("#signin-button")
    expect(page.locator("#signin-error")).to_contain_text("this key has no role")
    expect(page.locator("#tabs")).to_be_hidden()
    assert page.evaluate("sessionStorage.getItem('sortyard.adminKey')") is None
    context.close()


def test_pools_show_replicas_health_breakers_and_latency_live(page: Any, gateway: GatewayServer) -> None:
    from playwright.sync_api import expect

    def cell(pool: str, column: str) -> Any:
        return page.locator(f'#pools-list [data-pool="{pool}"] tbody tr').first.locator(f"td.{column}")

    expect(cell("medium", "health")).to_have_text("healthy")
    expect(cell("medium", "breaker")).to_have_text("closed")
    expect(cell("medium", "samples")).to_have_text("0")
    # traffic after the page opened shows up without a reload: the tab polls
    assert _chat(gateway, USER, "medium").status_code == 200
    assert _chat(gateway, USER, "medium").status_code == 200
    assert _chat(gateway, USER, "down").status_code == 502
    expect(cell("medium", "samples")).to_have_text("2")
    expect(cell("medium", "p50")).to_have_text(re.compile(r"^\d+\.\d ms$"))
    expect(cell("down", "health")).to_have_text("down")
    expect(cell("down", "breaker")).to_have_text("open")
    expect(cell("medium", "outstanding")).to_have_text("0")
    expect(page.locator("#pools-list .pool-name")).to_have_text(["small", "medium", "large", "down"])
    _shot(page, "pools")


def test_route_explain_shows_the_pool_and_why(page: Any) -> None:
    from playwright.sync_api import expect

    page.click('#tabs button[data-tab="explain"]')
    page.fill("#explain-prompt", PROMPT)
    page.click("#explain-button")
    expect(page.locator("#explain-pool")).to_have_text("large")
    expect(page.locator("#explain-reason")).to_have_text(re.compile(r"^learned p\(large\)=0\.\d+$"))
    expect(page.locator("#explain-classifier")).to_have_text('learned (model "auto")')
    expect(page.locator("#explain-probabilities rect")).to_have_count(3)
    _shot(page, "explain")


def test_the_playground_streams_an_answer_over_the_websocket(page: Any, gateway: GatewayServer) -> None:
    from playwright.sync_api import expect

    sockets: list[Any] = []
    frames: list[str] = []

    def watch(socket: Any) -> None:  # from its first frame on
        sockets.append(socket)
        socket.on("framereceived", lambda payload: frames.append(str(payload)))

    page.on("websocket", watch)
    page.click('#tabs button[data-tab="playground"]')
    expect(page.locator("#play-model option")).not_to_have_count(0)
    page.select_option("#play-model", "small")
    page.fill("#play-prompt", "Say hello")
    page.click("#play-send")
    expect(page.locator("#play-output")).to_have_text(ANSWER)
    expect(page.locator("#play-state")).to_have_text("done")
    expect(page.locator("#play-meta")).to_contain_text("finish_reason stop")
    assert [socket.url for socket in sockets] == [gateway.url.replace("http://", "ws://") + "/v1/ws"]
    assert any('"token"' in frame for frame in frames) and any('"done"' in frame for frame in frames)
    _shot(page, "playground")


def test_a_key_is_made_shown_once_and_revoked(page: Any, gateway: GatewayServer) -> None:
    from playwright.sync_api import expect

    page.click('#tabs button[data-tab="keys"]')
    expect(page.locator('#keys-table tr[data-key="root"] td.status')).to_have_text("active (admin)")
    page.fill("#key-tenant", "team-b")
    page.fill("#key-name", "console-ci")
    page.fill("#key-models", "small")
    page.fill("#key-rpm", "60")
    page.click("#key-create")
    expect(page.locator("#key-secret")).to_be_visible()
    expect(page.locator("#key-secret-value")).to_have_text(re.compile(r"^sk-"))
    secret = page.locator("#key-secret-value").inner_text()
    row = page.locator('#keys-table tr[data-key="console-ci"]')
    expect(row.locator("td.status")).to_have_text("active")
    expect(row).to_contain_text("60 rpm")
    _shot(page, "keys-created")
    assert _chat(gateway, secret, "small").status_code == 200

    page.click("#key-secret-dismiss")
    expect(page.locator("#key-secret")).to_be_hidden()
    expect(page.locator("body")).not_to_contain_text(secret)  # shown once: gone from the page
    page.once("dialog", lambda dialog: dialog.accept())
    row.locator("button.rotate").click()
    expect(page.locator("#key-secret-value")).to_have_text(re.compile(r"^sk-"))
    rotated = page.locator("#key-secret-value").inner_text()
    assert rotated != secret
    expect(row.locator("td code")).to_have_text(re.compile(r"^\w{12} \w{12}$"))  # both open it for a while
    assert _chat(gateway, rotated, "small").status_code == 200
    page.click("#key-secret-dismiss")
    page.once("dialog", lambda dialog: dialog.accept())
    row.locator("button.revoke").click()
    expect(row.locator("td.status")).to_have_text("revoked")
    expect(page.locator("#audit-table tbody tr").first).to_contain_text("revoke")
    assert _chat(gateway, secret, "small").status_code == 401
    assert _chat(gateway, rotated, "small").status_code == 401
    _shot(page, "keys")


def test_usage_and_spend_per_tenant_with_a_chart(page: Any, gateway: GatewayServer) -> None:
    from playwright.sync_api import expect

    for _ in range(3):  # 11 prompt + 6 completion tokens each, at $1 and $2 per 1k: $0.023 a request
        assert _chat(gateway, ACME, "small").status_code == 200
    gateway.settle()
    page.click('#tabs button[data-tab="usage"]')
    bar = page.locator('#usage-svg g[data-tenant="acme"]')
    expect(bar.locator("text.value")).to_have_text("$0.0690")
    expect(bar.locator("rect")).to_have_count(1)
    page.select_option("#usage-metric", "requests")
    expect(bar.locator("text.value")).to_have_text("3 requests")
    page.select_option("#usage-metric", "tokens")
    expect(bar.locator("text.value")).to_have_text("33 in + 18 out")
    expect(bar.locator("rect")).to_have_count(2)
    expect(page.locator('#usage-table tr.total[data-tenant="acme"]')).to_contain_text("$0.0690")
    page.select_option("#usage-metric", "cost_usd")
    _shot(page, "usage")


def test_the_policy_and_the_time_of_its_last_reload(page: Any, gateway: GatewayServer) -> None:
    from playwright.sync_api import expect

    loaded_at = gateway.gateway.reloader.loaded_at
    page.click('#tabs button[data-tab="policy"]')
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(loaded_at))
    expect(page.locator("#policy-loaded")).to_contain_text(when)
    expect(page.locator("#policy-reloads")).to_have_text("0 adopted, 0 refused since start")
    expect(page.locator("#policy-source")).to_contain_text("policy.yaml")
    expect(page.locator("#policy-json")).to_contain_text('"kind": "learned"')
    expect(page.locator("#policy-json")).not_to_contain_text(hash_key(ADMIN))
    expect(page.locator("#policy-json")).not_to_contain_text("sha256")
    _shot(page, "policy")


def test_signing_out_forgets_the_key_and_what_the_page_showed(page: Any) -> None:
    from playwright.sync_api import expect

    page.click('#tabs button[data-tab="keys"]')
    expect(page.locator('#keys-table tr[data-key="root"]')).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('sortyard.adminKey')") == ADMIN
    page.click("#signout")
    expect(page.locator("#signin")).to_be_visible()
    expect(page.locator("#tabs")).to_be_hidden()
    expect(page.locator("#keys-table tbody tr")).to_have_count(0)
    assert page.evaluate("sessionStorage.getItem('sortyard.adminKey')") is None
    page.reload()  # nothing kept: the page asks for a key again
    expect(page.locator("#signin")).to_be_visible()
    expect(page.locator("#panels")).to_be_hidden()
