"""``sortyard keys new``: a fresh API key, shown once, and the policy stanza that holds only its hash.

The stanza is checked as the policy loader checks a key (``gateway.policy.schema.ApiKey``): a tenant
or name the loader refuses, or ``--admin`` with another role, is refused here, before a key is made
for a stanza that could never be pasted."""

from __future__ import annotations

import re
import sys

import msgspec
import yaml

from gateway.keys.hashing import key_stanza, new_key
from gateway.policy.schema import KEY_NAME_PATTERN, NAME_PATTERN, ApiKey

MAX_NAME_LENGTH = 128
"""``Name`` and ``KeyName``'s ``max_length`` in the policy's schema."""


def stanza_problem(tenant: str, name: str | None, admin: bool, role: str | None) -> str | None:
    """Why the policy loader would refuse this key's stanza, or None."""
    if not re.match(NAME_PATTERN, tenant) or len(tenant) > MAX_NAME_LENGTH:
        return (
            f"--tenant {tenant!r}: expected a letter or digit, then letters, digits and . _ : / - "
            f"({MAX_NAME_LENGTH} at most)"
        )
    if name is not None and (not re.match(KEY_NAME_PATTERN, name) or len(name) > MAX_NAME_LENGTH):
        return (
            f"--name {name!r}: expected a letter or digit, then letters, digits and . _ : - "
            f"(no /: the name is a segment of /v1/admin/keys/NAME; {MAX_NAME_LENGTH} at most)"
        )
    if admin and role not in (None, "admin"):
        return f"--admin contradicts --role {role}; give only the role"
    return None


def keys_new(tenant: str, name: str | None, admin: bool, role: str | None = None) -> int:
    """Print a new key for ``tenant`` and the ``keys:`` entry to paste into the policy (``role``:
    its admin role, ``gateway.roles``; ``admin``: the same as role ``admin``); exit 2 for a stanza the
    policy would refuse."""
    problem = stanza_problem(tenant, name, admin, role)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    key = new_key()
    extra = f"    role: {role}\n" if role else "    admin: true\n" if admin else ""
    stanza = key_stanza(key, tenant, name) + extra
    try:  # as YAML reads it back: a tenant such as 123 or true would not be a string
        msgspec.convert(yaml.safe_load(stanza)[0], ApiKey, strict=True)
    except msgspec.ValidationError as e:
        print(f"error: the stanza would not load as a policy key: {e}", file=sys.stderr)
        return 2
    print(f"API key (shown once, store it now): {key}\n")
    print("Add under `keys:` in your policy:")
    print(stanza, end="")
    return 0
