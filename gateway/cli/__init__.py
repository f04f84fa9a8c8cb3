"""``sortyard``, the command line: the argument tree and :func:`main` in :mod:`gateway.cli.parser`, one
module a command (``serve``, ``local`` for ``run``, ``policy``, ``keys``, ``explain``, ``train``,
``cost``) and ``logs`` for the logging they share."""

from gateway.cli.parser import main

__all__ = ["main"]
