"""``sortyard audit verify`` on a good and a tampered file; ``export`` with ``--since``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import msgspec
import pytest

from gateway.audit.entry import Entry, Event, link
from gateway.audit.redis_store import RedisAuditStore
from gateway.cli.parser import main as cli


def _write(path: Path, n: int = 4) -> list[bytes]:
    entries: list[Entry] = []
    for i in range(n):
        entries.append(
            link(
                Event(at=100 + i, actor="root", action="key.create", target=f"k{i}"),
                entries[-1] if entries else None,
            )
        )
    lines = [msgspec.json.encode(e) for e in entries]
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return lines


def test_verify_a_good_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path / "audit.jsonl")
    assert cli(["audit", "verify", "--file", str(tmp_path / "audit.jsonl")]) == 0
    assert "4 entries, chain intact" in capsys.readouterr().out


def test_verify_a_tampered_file_names_the_first_bad_seq(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "audit.jsonl"
    lines = _write(path)
    path.write_bytes(b"\n".join([lines[0], lines[1].replace(b"k1", b"k9"), *lines[2:]]) + b"\n")
    assert cli(["audit", "verify", "--file", str(path)]) == 1
    assert "chain broken at seq 1: hash mismatch" in capsys.readouterr().err


def test_verify_without_a_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="no audit file"):
        cli(["audit", "verify", "--file", str(tmp_path / "none.jsonl")])


def test_export_prints_json_lines_since_a_time(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    _write(tmp_path / "audit.jsonl")
    assert cli(["audit", "export", "--file", str(tmp_path / "audit.jsonl"), "--since", "102"]) == 0
    out = capsysbinary.readouterr().out.splitlines()
    assert [json.loads(line)["seq"] for line in out] == [2, 3]


def test_verify_and_export_read_redis(redis_flushed: str, capsys: pytest.CaptureFixture[str]) -> None:
    async def write() -> None:
        store = RedisAuditStore.from_url(redis_flushed)
        for i in range(2):
            await store.append(Event(at=float(i), actor="root", action="drain"))
        await store.close()

    asyncio.run(write())
    assert cli(["audit", "verify", "--redis-url", redis_flushed]) == 0
    assert "2 entries, chain intact" in capsys.readouterr().out
    assert cli(["audit", "export", "--redis-url", redis_flushed]) == 0


def test_a_redis_url_that_is_not_one_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli(["audit", "verify", "--redis-url", "notaurl"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --redis-url: ") and err.count("\n") == 1
