"""``sortyard keys create|list|show|update|rotate|revoke|audit``: the key admin API from a shell.

Each command calls a running gateway (``--url``, default ``$SORTYARD_URL`` or
``http://127.0.0.1:8000``) with an admin key (``--admin-key``, default ``$SORTYARD_ADMIN_KEY``) and
prints the answer as JSON; a refusal prints the gateway's error message and exits 1.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import httpx

from gateway.policy.schema import KEY_NAME_PATTERN
from gateway.roles import ROLES

__all__ = ["add_key_admin_commands"]

NONE = "none"
"""A limit, budget or expiry given as this (``--rpm none``) is removed: the API is sent ``null``."""


def _non_negative(kind: Callable[[str], float]) -> Callable[[str], float]:
    """An argparse ``type``: a finite number of ``kind``, at least 0 (``nan`` or ``inf`` would reach
    the API as JSON it cannot read, a negative one as a limit it refuses)."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value: {text!r}") from None
        if not math.isfinite(value) or value < 0:
            raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
        return value

    return parse


def _number_or_none(kind: Callable[[str], float]) -> Callable[[str], float | str]:
    """An argparse ``type``: a finite number of ``kind``, at least 0, or ``none``; what was not given
    stays None."""
    number = _non_negative(kind)

    def parse(text: str) -> float | str:
        return NONE if text.lower() == NONE else number(text)

    return parse


def _key_name(text: str) -> str:
    """An argparse ``type``: a key's name as the policy spells one (``KEY_NAME_PATTERN``): an empty
    name or ``..`` would otherwise ask for another URL (every key, or the admin API's root)."""
    if not re.match(KEY_NAME_PATTERN, text):
        raise argparse.ArgumentTypeError(
            f"expected a key name (a letter or digit, then letters, digits and . _ : -), got {text!r}"
        )
    return text


def _key_path(name: str, suffix: str = "") -> str:
    """``/v1/admin/keys/NAME`` with the name quoted as one path segment."""
    return f"/v1/admin/keys/{quote(name, safe='')}{suffix}"


def _json(value: float | str) -> float | None:
    """What the API is sent for a parsed value: ``none`` as ``null``, which removes it."""
    return None if isinstance(value, str) else value


def _limits(args: argparse.Namespace) -> dict[str, float | None] | None:
    """Only the limits given: the gateway merges them into the key's, so the others stay."""
    limits = {
        "requests_per_minute": args.rpm,
        "tokens_per_minute": args.tpm,
        "max_concurrent": args.max_concurrent,
    }
    given = {name: _json(value) for name, value in limits.items() if value is not None}
    return given or None


def _scope(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if args.pools is not None:
        body["pools"] = [p for p in args.pools.split(",") if p]
    if args.models is not None:
        body["models"] = [m for m in args.models.split(",") if m]
    if (limits := _limits(args)) is not None:
        body["limits"] = limits
    if args.monthly_usd is not None:
        usd = _json(args.monthly_usd)
        body["budget"] = None if usd is None else {"monthly_usd": usd}
    if args.expires_at is not None:
        body["expires_at"] = _json(args.expires_at)
    return body


def _call(args: argparse.Namespace, method: str, path: str, body: dict[str, Any] | None = None) -> int:
    if not args.admin_key:
        print("an admin key is needed: --admin-key or $SORTYARD_ADMIN_KEY", file=sys.stderr)
        return 2
    try:
        response = httpx.request(
            method,
            args.url.rstrip("/") + path,
            json=body,
            headers={"Authorization": f"Bearer {args.admin_key}"},
            timeout=10,
        )
    except httpx.HTTPError as exc:
        print(f"cannot reach {args.url}: {exc}", file=sys.stderr)
        return 1
    try:
        answer = response.json()
    except ValueError:
        print(f"HTTP {response.status_code}: {response.text[:200]}", file=sys.stderr)
        return 1
    if response.status_code >= 400:
        print(f"HTTP {response.status_code}: {answer.get('error', {}).get('message')}", file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=2))
    return 0


def _changes(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = dict(_scope(args))
    if args.role:
        body["role"] = None if args.role == "none" else args.role
    return body


def _create(args: argparse.Namespace) -> int:
    body = {"tenant": args.tenant, **_scope(args)}
    if args.name:
        body["name"] = args.name
    if args.admin:
        body["admin"] = True
    if args.role:
        body["role"] = args.role
    return _call(args, "POST", "/v1/admin/keys", body)


def add_key_admin_commands(keys: Any) -> None:
    """Add the admin API's commands to the ``keys`` subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=os.environ.get("SORTYARD_URL", "http://127.0.0.1:8000"))
    common.add_argument("--admin-key", default=os.environ.get("SORTYARD_ADMIN_KEY"))
    scope = argparse.ArgumentParser(add_help=False)
    scope.add_argument("--pools", help="comma-separated pools the key may use (empty: all)")
    scope.add_argument("--models", help="comma-separated model names the key may use besides")
    count, number = _number_or_none(int), _number_or_none(float)
    scope.add_argument("--rpm", type=count, help="requests per minute (none: no limit)")
    scope.add_argument("--tpm", type=count, help="tokens per minute (none: no limit)")
    scope.add_argument("--max-concurrent", type=count, help="requests in flight at once (none: no limit)")
    scope.add_argument("--monthly-usd", type=number, help="monthly budget (none: no budget)")
    scope.add_argument("--expires-at", type=number, help="unix time it stops working (none: never)")

    create = keys.add_parser("create", parents=[common, scope], help="make a key on a running gateway")
    create.add_argument("--tenant", required=True)
    create.add_argument("--name", type=_key_name)
    create.add_argument("--admin", action="store_true", help="the same as --role admin")
    create.add_argument("--role", choices=ROLES, help="what it may do on the admin API (docs/security.md)")
    create.set_defaults(handler=_create)

    listing = keys.add_parser("list", parents=[common], help="every key (the policy file's too)")
    listing.add_argument("--tenant")
    listing.set_defaults(
        handler=lambda a: _call(
            a, "GET", "/v1/admin/keys" + (f"?tenant={quote(a.tenant, safe='')}" if a.tenant else "")
        )
    )

    for verb, method, suffix, help_text in (
        ("show", "GET", "", "one key"),
        ("revoke", "POST", "/revoke", "stop a key at once, on every replica"),
    ):
        command = keys.add_parser(verb, parents=[common], help=help_text)
        command.add_argument("name", type=_key_name)
        command.set_defaults(handler=lambda a, m=method, s=suffix: _call(a, m, _key_path(a.name, s)))

    update = keys.add_parser("update", parents=[common, scope], help="change what is given; none removes")
    update.add_argument("name", type=_key_name)
    update.add_argument("--role", choices=(*ROLES, "none"), help="its new role (none: a plain key)")
    update.set_defaults(handler=lambda a: _call(a, "PATCH", _key_path(a.name), _changes(a)))

    rotate = keys.add_parser("rotate", parents=[common], help="a new secret; the old one for --grace-s")
    rotate.add_argument("name", type=_key_name)
    rotate.add_argument("--grace-s", type=_non_negative(float), default=3600.0)
    rotate.set_defaults(
        handler=lambda a: _call(a, "POST", _key_path(a.name, "/rotate"), {"grace_s": a.grace_s})
    )

    audit = keys.add_parser("audit", parents=[common], help="who did what to which key")
    audit.add_argument("--limit", type=_non_negative(int), default=100)
    audit.set_defaults(handler=lambda a: _call(a, "GET", f"/v1/admin/audit?limit={a.limit}"))
