"""``sortyard keys new``: a fresh API key, shown once, and the policy stanza that holds only its hash."""

from __future__ import annotations

from gateway.keys.hashing import key_stanza, new_key


def keys_new(tenant: str, name: str | None, admin: bool, role: str | None = None) -> int:
    """Print a new key for ``tenant`` and the ``keys:`` entry to paste into the policy (``role``:
    its admin role, ``gateway.roles``; ``admin``: the same as role ``admin``)."""
    key = new_key()
    print(f"API key (shown once, store it now): {key}\n")
    print("Add under `keys:` in your policy:")
    stanza = key_stanza(key, tenant, name)
    extra = f"    role: {role}\n" if role else "    admin: true\n" if admin else ""
    print(stanza + extra, end="")
    return 0
