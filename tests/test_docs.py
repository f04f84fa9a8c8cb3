"""README.md and docs/: links resolve, no narration, policy YAML blocks parse, every module has tests."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

NARRATION = [
    re.compile(r"\b(first|second|third|fourth|this|last|previous|earlier) session\b", re.I),
    re.compile(r"\bissues? \d+\b", re.I),
]
"""Figures say their date, machine and command; they never say which work session or ticket made them."""

FENCE = re.compile(r"^```.*?^```", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.M | re.S)


def _prose(text: str) -> str:
    """The text outside fenced and inline code, where links and headings live."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = INLINE_CODE.sub(lambda m: m.group(0)[1:-1], heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        result.add(base if n == 0 else f"{base}-{n}")
    return result


def test_the_pages_exist() -> None:
    names = {page.name for page in PAGES if page.parent.name == "docs"}
    assert {"README.md", "benchmarks.md", "testing.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no file {linked}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading with anchor #{anchor} in {linked.name}")
    assert not broken, "\n".join(broken)


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = {target.partition("#")[0] for target in LINK.findall(readme)}
    missing = [f"docs/{page.name}" for page in PAGES[1:] if f"docs/{page.name}" not in linked]
    assert missing == [], missing


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_narration(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    found = [
        f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
        for pattern in NARRATION
        for m in pattern.finditer(text)
    ]
    assert not found, "\n".join(found)


def policy_blocks() -> list[tuple[str, str]]:
    """Every fenced yaml block in docs/ with a top-level ``pools:`` or ``routing:`` key."""
    blocks = []
    for page in PAGES[1:]:
        for i, block in enumerate(YAML_BLOCK.findall(page.read_text(encoding="utf-8"))):
            if re.search(r"^(pools|routing):", block, re.M):
                blocks.append((f"{page.name}[{i}]", block))
    return blocks


def test_policy_blocks_are_found() -> None:
    names = {name.partition("[")[0] for name, _ in policy_blocks()}
    assert {"policy.md", "replicas.md"} <= names


@pytest.mark.parametrize(("name", "block"), policy_blocks(), ids=[name for name, _ in policy_blocks()])
def test_policy_blocks_parse(name: str, block: str) -> None:
    data = yaml.safe_load(block)
    assert isinstance(data, dict) and ({"pools", "routing"} & data.keys()), name


def test_slug_follows_github() -> None:
    assert slug('Tier routing (`model: "auto"`)') == "tier-routing-model-auto"
    assert slug("Caches: responses, prompt prefixes") == "caches-responses-prompt-prefixes"
    assert slug("The engine's server") == "the-engines-server"


SOURCE_PACKAGES = ("gateway", "backends", "tools")
TEST_MAP_HEADING = "## Where the tests are"
TEST_MAP_ROW = re.compile(r"^\| `([\w/]+\.py)` \| (.+?) \|\s*$", re.M)


def mapped_tests() -> dict[str, list[str]]:
    """docs/architecture.md's map: module -> the test files that cover it (it has none of its own name)."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.partition(TEST_MAP_HEADING)[2].partition("\n## ")[0]
    return {module: INLINE_CODE.findall(tests) for module, tests in TEST_MAP_ROW.findall(section)}


def own_test_file(module: Path) -> Path:
    """Where a module's own tests live: the tree mirrored under tests/, ``test_`` before the name."""
    return ROOT / "tests" / module.parent / f"test_{module.name}"


def source_modules() -> list[Path]:
    return [
        path.relative_to(ROOT)
        for package in SOURCE_PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.name not in ("__init__.py", "__main__.py")
    ]


def test_the_test_map_is_found() -> None:
    assert len(mapped_tests()) >= 10


def test_every_module_has_tests() -> None:
    """Every module has tests/<path>/test_<name>.py, or a row in docs/architecture.md's map."""
    mapped = mapped_tests()
    missing = [
        str(module)
        for module in source_modules()
        if not own_test_file(module).exists() and module.as_posix() not in mapped
    ]
    assert not missing, f"no test file of their name and not in docs/architecture.md's map: {missing}"


def test_the_test_map_names_real_files() -> None:
    problems = []
    for module, tests in mapped_tests().items():
        if not (ROOT / module).exists():
            problems.append(f"{module}: no such module")
        if not tests:
            problems.append(f"{module}: no test file named")
        paths = [test.strip("`") for test in tests]
        problems += [f"{module}: no test file {path}" for path in paths if not (ROOT / path).exists()]
    assert not problems, "\n".join(problems)


def test_the_policy_reference_example_loads() -> None:
    from gateway.policy import parse_policy

    text = (ROOT / "docs" / "policy.md").read_text(encoding="utf-8")
    example = text.partition("## A complete example")[2]
    block = YAML_BLOCK.search(example)
    assert block is not None, "docs/policy.md: no yaml block under 'A complete example'"
    policy = parse_policy(yaml.safe_load(block.group(1)), "docs/policy.md")
    assert policy.pools and policy.classifier is not None
