"""The harness's error tree.

BenchError                 anything that makes a run's figures unusable
+-- StartError             a process did not start or never became healthy
+-- ProbeError             a target answered the sanity request wrongly
+-- WrkError               wrk failed, or saw non-2xx responses or socket errors
"""

from __future__ import annotations


class BenchError(Exception):
    """Base of every harness failure; the driver prints it and exits non-zero."""


class StartError(BenchError):
    """A child process exited early or never answered its health check."""


class ProbeError(BenchError):
    """A target answered the one-off sanity request with the wrong status or body."""


class WrkError(BenchError):
    """wrk exited non-zero, printed no result, or counted errors during a run."""
