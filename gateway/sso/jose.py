"""authlib's JOSE, imported in one place (and only when a policy turns SSO on).

authlib marks ``authlib.jose`` as moving to ``joserfc`` in 2.0 (and turns its warnings on for the whole
process when ``authlib.deprecate`` is imported); the warning says nothing a running
gateway can act on, so it is silenced here rather than in every log.
"""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    import authlib.deprecate  # noqa: F401  (it turns its own warnings on when imported: first, then off)

    warnings.simplefilter("ignore")
    from authlib.jose import JsonWebKey, JsonWebToken, KeySet
    from authlib.jose.errors import (
        BadSignatureError,
        DecodeError,
        ExpiredTokenError,
        InvalidClaimError,
        InvalidTokenError,
        JoseError,
        MissingClaimError,
    )

__all__ = [
    "BadSignatureError",
    "DecodeError",
    "ExpiredTokenError",
    "InvalidClaimError",
    "InvalidTokenError",
    "JoseError",
    "JsonWebKey",
    "JsonWebToken",
    "KeySet",
    "MissingClaimError",
]
