"""``sortyard policy check``: load policy files as the gateway would, without serving: each with the
overlay ``sortyard serve --policy FILE`` merges on top of it (``local.yaml`` beside it, or
``--overlay`` / ``$SORTYARD_POLICY_OVERLAY``), since a broken overlay stops the server as surely as a
broken policy."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from gateway.policy import Policy, PolicyError, load_policy
from gateway.settings import Settings

__all__ = ["load_served", "overlay_for", "policy_check", "require_overlay"]

OVERLAY_ENV = "SORTYARD_POLICY_OVERLAY"


def overlay_for(policy: str, overlay: str | None = None) -> str:
    """The overlay ``sortyard serve --policy POLICY [--overlay OVERLAY]`` merges: the one given, else
    ``$SORTYARD_POLICY_OVERLAY``, else ``Settings.overlay_path``'s default (it may be absent)."""
    given = overlay if overlay is not None else os.environ.get(OVERLAY_ENV)
    return Settings(policy_path=policy, policy_overlay=given).overlay_path


def require_overlay(overlay: str | None) -> None:
    """An overlay named on the command line must be there: the loader skips a missing one (the default
    ``local.yaml`` is optional), so a typo would serve, or pass, without the keys it holds."""
    if overlay is not None and not os.path.exists(overlay):
        raise PolicyError(f"{overlay}: no such overlay file (--overlay)")


def load_served(policy: str, overlay: str | None = None) -> tuple[Policy, str | None]:
    """The policy ``sortyard serve`` would serve from these flags, and the overlay merged into it
    (None: there was none)."""
    require_overlay(overlay)
    merged = overlay_for(policy, overlay)
    loaded = load_policy(policy, merged)
    return loaded, merged if os.path.exists(merged) else None


def policy_check(paths: Sequence[str], overlay: str | None = None, *, use_overlay: bool = True) -> int:
    """A summary line for each valid file (naming the overlay merged into it), an error on standard
    error for each invalid one (exit 1). ``use_overlay`` False checks the files alone."""
    status = 0
    for path in paths:
        merged: str | None = None
        try:
            if use_overlay:
                policy, merged = load_served(path, overlay)
            else:
                policy = load_policy(path)
        except PolicyError as e:  # the loader names an overlay merged into the file it refuses
            print(f"error: {e}", file=sys.stderr)
            status = 1
            continue
        replicas = sum(len(p.replicas) for p in policy.pools.values())
        what = f"; overlay {merged} merged" if merged else "; no overlay" if use_overlay else ""
        print(
            f"{path}: ok ({len(policy.pools)} pools, {replicas} replicas, {len(policy.aliases)} aliases"
            f"{what})"
        )
    return status
