"""The gateway overhead benchmark harness behind ``bench/overhead.py``.

One noun a module: ``nginx`` (the canned upstream), ``processes`` (pinned child processes and their
RSS/CPU from /proc), ``wrk`` (the load generator and its result), ``targets`` (what is measured:
nginx direct, the bare forwarder, gateway configurations), ``measure`` (the run plan), ``report``
(markdown and JSON). ``standin.py`` is the bare forwarder, run as its own script.
"""
