"""``sortyard keys new``: a fresh API key, shown once, and the policy stanza that holds only its hash."""

from __future__ import annotations

from gateway.keys.hashing import key_stanza, new_key


def keys_new(tenant: str, name: str | None, admin: bool) -> int:
    """Print a new key for ``tenant`` and the ``keys:`` entry to paste into the policy."""
    key = new_key()
    print(f"API key (shown once, store it now): {key}\n")
    print("Add under `keys:` in your policy:")
    stanza = key_stanza(key, tenant, name)
    print(stanza + ("    admin: true\n" if admin else ""), end="")
    return 0
