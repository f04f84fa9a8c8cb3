"""How the suite is spread over pytest-xdist's workers: slow files first, a Redis database a worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.durations import file_seconds, load_durations
from tools.servers.redis_server import worker_database

pytest_plugins = ["pytester"]


@pytest.mark.parametrize(
    ("url", "worker", "expected"),
    [
        ("redis://127.0.0.1:6379/0", None, "redis://127.0.0.1:6379/0"),
        ("redis://127.0.0.1:6379/0", "gw3", "redis://127.0.0.1:6379/3"),
        ("redis://127.0.0.1:6379", "gw1", "redis://127.0.0.1:6379/1"),
        ("redis://:pw@h:6380/4?ssl_cert_reqs=none", "gw2", "redis://:pw@h:6380/6?ssl_cert_reqs=none"),
    ],
)
def test_each_worker_gets_its_own_database(url: str, worker: str | None, expected: str) -> None:
    assert worker_database(url, worker) == expected


def test_files_with_slow_tests_come_first_and_stay_whole(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\nmarkers =\n    slow: slow")
    pytester.makeconftest("from tests.conftest import pytest_collection_modifyitems  # noqa: F401")
    pytester.makepyfile(
        test_a="def test_1(): pass\ndef test_2(): pass",
        test_b="import pytest\ndef test_1(): pass\n@pytest.mark.slow\ndef test_2(): pass",
        test_c="def test_1(): pass",
    )
    result = pytester.runpytest("--collect-only", "-q")
    ids = [line for line in result.outlines if "::" in line]
    assert ids == [
        "test_b.py::test_1",
        "test_b.py::test_2",
        "test_a.py::test_1",
        "test_a.py::test_2",
        "test_c.py::test_1",
    ]


def test_a_junit_report_gives_each_files_seconds(tmp_path: Path) -> None:
    report = tmp_path / "junit.xml"
    report.write_text(
        "<testsuites><testsuite>"
        '<testcase classname="tests.bench.test_a" name="t1" time="1.5"/>'
        '<testcase classname="tests.bench.test_a" name="t2" time="2.0"/>'
        '<testcase classname="tests.e2e.test_b.TestThing" name="t" time="4"/>'
        "</testsuite></testsuites>"
    )
    assert file_seconds(report) == {"tests/bench/test_a.py": 3.5, "tests/e2e/test_b.py": 4.0}


def test_the_durations_name_files_that_exist() -> None:
    root = Path(__file__).resolve().parents[1]
    assert [path for path in load_durations() if not (root / path).is_file()] == []
