"""gateway/console/page.py: the page is whole, self-contained, and its CSP admits exactly its own code."""

from __future__ import annotations

import base64
import hashlib
import re
from importlib.resources import files

import pytest

from gateway.console.page import SCRIPTS, build_page


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


@pytest.fixture(scope="module")
def html() -> str:
    return build_page().body.decode()


def test_the_csp_admits_the_inline_script_and_style_by_hash(html: str) -> None:
    (script,) = re.findall(r"<script>(.*?)</script>", html, re.S)
    (style,) = re.findall(r"<style>(.*?)</style>", html, re.S)
    csp = build_page().headers["content-security-policy"]
    assert f"script-src {_sha256(script)};" in csp
    assert f"style-src {_sha256(style)};" in csp
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe" not in csp


def test_every_script_is_inlined_in_order_and_the_page_starts(html: str) -> None:
    positions = [html.index(f"// {name}\n") for name in SCRIPTS]
    assert positions == sorted(positions)
    assert html.rstrip().endswith("</html>") and "SY.start();" in html
    assert "/* console.css */" not in html and "/* console scripts */" not in html


def test_nothing_is_loaded_from_elsewhere(html: str) -> None:
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert not re.search(r"""\b(import|fetch)\s*\(\s*["']https?:""", html)
    assert "innerHTML" not in html and "eval(" not in html  # data only ever lands as text


def test_every_element_the_scripts_use_is_in_the_page(html: str) -> None:
    static = files("gateway.console") / "static"
    ids = set(re.findall(r'\bid="([\w-]+)"', (static / "index.html").read_text()))
    used = {
        found for name in SCRIPTS for found in re.findall(r'\$\("([\w-]+)"\)', (static / name).read_text())
    }
    assert used and used - ids == set()


def test_the_tabs_and_their_panels_match(html: str) -> None:
    tabs = re.findall(r'data-tab="(\w+)"', html)
    assert tabs == ["pools", "explain", "playground", "keys", "usage", "policy"]
    assert all(f'id="tab-{tab}"' in html for tab in tabs)
    assert all(f'SY.tab("{tab}"' in html for tab in tabs)


def test_the_page_is_served_with_defensive_headers() -> None:
    headers = build_page().headers
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["x-frame-options"] == "DENY"
    assert headers["referrer-policy"] == "no-referrer"


ACTIONS = {  # what GET /v1/admin/whoami may list (docs/security.md#roles)
    *("usage.read", "pools.read", "policy.read", "route.explain", "keys.read", "keys.write"),
    *("audit.read", "policy.reload", "gateway.drain", "session.read"),
}


def test_signing_in_asks_who_the_key_is_not_whether_it_reads_the_policy() -> None:
    app = (files("gateway.console") / "static" / "app.js").read_text()
    assert app.count('"/v1/admin/whoami"') == 2  # a pasted key and a single sign-on session
    assert "/v1/admin/policy" not in app  # a tenant-admin may not read it, and may sign in


def test_every_tab_names_the_action_its_role_needs(html: str) -> None:
    needs = dict(re.findall(r'SY\.tab\("(\w+)", \{\s*needs: "([\w.]+)"', html))
    assert set(needs) == set(re.findall(r'data-tab="(\w+)"', html))
    assert set(needs.values()) <= ACTIONS
    assert needs["keys"] == "keys.read" and needs["usage"] == "usage.read"
    # what is only for some roles is offered only to them
    used = set(re.findall(r'SY\.may\("([\w.]+)"\)', html))
    assert {"policy.reload", "gateway.drain", "keys.write", "audit.read"} <= used <= ACTIONS
