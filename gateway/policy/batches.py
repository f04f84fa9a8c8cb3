"""The policy's ``batches:`` section: where uploaded files live, how large a batch may be, and how each
gateway process runs batch lines (``gateway.batches``).

It sits beside the policy rather than in ``gateway.batches``: the policy nests it, and the batch
runner imports the request's owner (``gateway.lifecycle``), which imports the policy.
"""

from __future__ import annotations

from typing import Annotated

import msgspec


class BatchesConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """OpenAI's Files and Batch APIs (``/v1/files``, ``/v1/batches``) and the batch runner."""

    files_dir: str = "sortyard-files"
    """Directory of uploaded files and batch output files (relative: to the working directory). Gateways
    sharing one Redis must share this directory too (a volume), or a file uploaded to one is missing
    on the others."""
    max_file_bytes: Annotated[int, msgspec.Meta(gt=0)] = 100 * 1024 * 1024
    """Largest accepted upload; larger gets 413."""
    max_lines: Annotated[int, msgspec.Meta(gt=0)] = 50_000
    """Most requests in one batch file (OpenAI's bound)."""
    concurrency: Annotated[int, msgspec.Meta(ge=0)] = 8
    """Batch lines one gateway process runs at once (0: this process runs none, it only serves the API)."""
    lease_s: Annotated[float, msgspec.Meta(gt=0)] = 600.0
    """How long a claimed line is this process's: past it (the process died) another claims it. Keep it
    above every pool's ``timeouts.total_s``, or a slow line may run twice (its result counts once)."""
    poll_interval_s: Annotated[float, msgspec.Meta(gt=0)] = 1.0
    """How often an idle runner looks for batch work (a finished line starts the next at once)."""
    priority: int = 1
    """The priority class batch lines run in: at least this, and always after every ``priority`` the
    policy gives a key or tenant (lower runs first), so interactive requests go first."""
