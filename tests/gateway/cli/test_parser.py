"""gateway/cli/parser.py: one argument tree for every README command, each answering ``--help``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli import main

REPO = Path(__file__).resolve().parents[3]


def readme_commands() -> list[list[str]]:
    """The commands of the README's "Command line" table: ``sortyard`` then its lower-case words."""
    commands = []
    for line in (REPO / "README.md").read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\| `sortyard ([^`]*)`", line)
        if match:
            words = match.group(1).split()
            commands.append(words[: next((i for i, w in enumerate(words) if not w.isalpha()), len(words))])
    return commands


def test_the_readme_table_is_read() -> None:
    assert readme_commands() == [
        ["run"],
        ["serve"],
        ["policy", "check"],
        ["keys", "new"],
        ["keys", "create"],
        ["route", "explain"],
        ["router", "train"],
        ["cost", "estimate"],
    ]


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", readme_commands(), ids=" ".join)
def test_every_readme_command_answers_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert _help(command, capsys).startswith(f"usage: sortyard {' '.join(command)} ")
    parent = _help(command[:-1], capsys)  # and its parent lists it
    assert re.search(rf"^\s+{command[-1]}\s", parent, re.M), parent


def test_top_level_help_lists_every_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    listed = set(re.findall(r"^ {4}(\w+) ", done.stdout, re.M))
    assert {command[0] for command in readme_commands()} <= listed, done.stdout


def test_arguments_reach_the_command_or_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["route", "explain", "Prove that there are infinitely many primes.", "--tools"]) == 0
    assert "pool: " in capsys.readouterr().out
    for bad in (["keys", "new", "--tenant", "a", "--bogus"], ["policy"], ["route"], ["nope"]):
        with pytest.raises(SystemExit) as exit_info:
            main(bad)
        assert exit_info.value.code == 2
