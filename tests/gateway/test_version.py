"""One version, in pyproject.toml: the CLI, the image tags and the CHANGELOG carry the same."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from gateway.cli.parser import main
from gateway.version import installed_version

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE_TAG = re.compile(r"sortyard/[a-z-]+:(\d+\.\d+\.\d+(?:[.+-][0-9A-Za-z.]+)?)")
NEW_TAG = re.compile(r"name: sortyard/[a-z-]+.*\n\s*newTag: (\S+)")  # a kustomization's images


def test_the_installed_version_is_pyprojects() -> None:
    assert installed_version() == VERSION


def test_sortyard_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"sortyard {VERSION}"


def test_every_image_tag_is_the_version() -> None:
    tags: dict[str, list[str]] = {}
    for path in [*ROOT.glob("deploy/**/*"), *ROOT.glob("docs/*.md"), ROOT / "README.md"]:
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            for tag in IMAGE_TAG.findall(text):
                tags.setdefault(tag, []).append(str(path.relative_to(ROOT)))
    production = (ROOT / "deploy/k8s/overlays/production/kustomization.yaml").read_text(encoding="utf-8")
    for tag in NEW_TAG.findall(production):  # the dev overlays build their own `dev` images
        tags.setdefault(tag, []).append("deploy/k8s/overlays/production/kustomization.yaml")
    assert tags and set(tags) == {VERSION}, tags


def test_the_changelog_opens_with_this_version() -> None:
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"), re.M)
    assert headings[0] == VERSION
