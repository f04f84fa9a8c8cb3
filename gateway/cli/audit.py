"""``sortyard audit verify|export``: check and copy the audit trail (``gateway.audit``).

sortyard audit verify [--file PATH | --redis-url URL]
sortyard audit export [--file PATH | --redis-url URL] [--since UNIX_SECONDS]

``verify`` walks the chain and exits 0 with "N entries, chain intact", or 1 naming the first bad
``seq`` and why (hash mismatch, prev mismatch, gap, unreadable). ``export`` prints the entries as
JSON lines, oldest first: keep a copy outside the gateway's reach (docs/security.md says why). The
file defaults to ``SORTYARD_AUDIT_FILE``, else ``.local/audit.jsonl`` (``sortyard run``'s).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

import msgspec

from gateway.audit.chain import verify
from gateway.audit.file_store import FileAuditStore
from gateway.audit.redis_store import RedisAuditStore
from gateway.audit.store import AuditStore
from gateway.cli.local import DEV_AUDIT_FILE

__all__ = ["add_audit_commands"]


def _lines(args: argparse.Namespace) -> list[bytes]:
    store: AuditStore
    if args.redis_url:
        try:
            store = RedisAuditStore.from_url(args.redis_url, timeout_s=5.0)
        except ValueError as exc:  # not a redis:// or rediss:// URL: said, not a traceback
            print(f"error: --redis-url: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
    else:
        path = args.file or os.environ.get("SORTYARD_AUDIT_FILE") or DEV_AUDIT_FILE
        if not os.path.exists(path):
            raise SystemExit(f"error: no audit file at {path}")
        store = FileAuditStore(path)

    async def read() -> list[bytes]:
        try:
            return await store.lines()
        finally:
            await store.close()

    try:
        return asyncio.run(read())
    except (OSError, TimeoutError) as exc:
        raise SystemExit(f"error: could not read the audit trail: {exc!r}") from None


def audit_verify(args: argparse.Namespace) -> int:
    verdict = verify(_lines(args))
    print(verdict.describe(), file=sys.stdout if verdict.is_intact else sys.stderr)
    return 0 if verdict.is_intact else 1


def audit_export(args: argparse.Namespace) -> int:
    out = sys.stdout.buffer
    for line in _lines(args):
        if args.since is not None:
            at = msgspec.json.decode(line, type=dict[str, Any]).get("at", 0)
            if not isinstance(at, int | float) or at < args.since:
                continue
        out.write(line.strip() + b"\n")
    out.flush()
    return 0


def add_audit_commands(sub: Any) -> None:
    """``audit verify`` and ``audit export`` under ``sub`` (the top-level subparsers)."""
    audit = sub.add_parser("audit", help="the admin audit trail: verify its hash chain, export it")
    commands = audit.add_subparsers(dest="audit_command", required=True)
    for name, handler, help in (
        ("verify", audit_verify, "walk the hash chain: intact, or the first bad seq and why"),
        ("export", audit_export, "print the entries as JSON lines, oldest first"),
    ):
        command = commands.add_parser(name, help=help)
        source = command.add_mutually_exclusive_group()
        source.add_argument(
            "--file", help="the JSONL file (default: $SORTYARD_AUDIT_FILE or .local/audit.jsonl)"
        )
        source.add_argument("--redis-url", help="the Redis holding sy:{audit}:chain")
        if name == "export":
            command.add_argument("--since", type=float, help="only entries at or after this unix time")
        command.set_defaults(handler=handler)
