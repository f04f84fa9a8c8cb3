"""JWT verification against the provider's keys: signature, ``iss``, ``aud``, ``exp``/``nbf``/``iat``.

Every failure is an ``InvalidToken`` (401 ``invalid_token``) whose message says which check failed,
so an operator reading a client's error knows whether to fix the clock, the audience or the provider.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from typing import Any

from gateway.policy.sso import SsoConfig
from gateway.sso.errors import InvalidToken
from gateway.sso.jose import (
    BadSignatureError,
    DecodeError,
    ExpiredTokenError,
    InvalidClaimError,
    InvalidTokenError,
    JoseError,
    JsonWebToken,
    MissingClaimError,
)
from gateway.sso.jwks import ProviderKeys, ProviderUnavailable


def token_header(token: str) -> dict[str, Any]:
    """The JOSE header of a compact JWT, or InvalidToken."""
    try:
        head = token.split(".", 1)[0]
        header = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidToken("Malformed token: the JWT header cannot be read.") from exc
    if not isinstance(header, dict):
        raise InvalidToken("Malformed token: the JWT header is not an object.")
    return header


class TokenVerifier:
    """Checks tokens of one provider; ``clock`` (seconds since the epoch) is injectable for tests."""

    def __init__(self, config: SsoConfig, keys: ProviderKeys, clock: Callable[[], float] = time.time) -> None:
        self._config = config
        self._keys = keys
        self._clock = clock
        self._jwt = JsonWebToken(list(config.algorithms))

    async def verify(
        self, token: str, *, audience: str | None = None, nonce: str | None = None
    ) -> dict[str, Any]:
        """The token's claims once every check passed; ``nonce`` is checked on an ID token."""
        header = token_header(token)
        if header.get("alg") not in self._config.algorithms:
            raise InvalidToken(f"Token algorithm {header.get('alg')!r} is not accepted.")
        kid = header.get("kid")
        try:
            key = await self._keys.key_for(kid if isinstance(kid, str) else None)
        except ProviderUnavailable as exc:
            raise InvalidToken(f"The identity provider's keys cannot be read ({exc}).") from exc
        if key is None:
            raise InvalidToken(f"Token signed with an unknown key (kid {kid!r}).")
        kty = getattr(key, "kty", None)
        if _KEY_TYPES.get(str(header["alg"])[:2]) != kty:  # an RSA key read as an EC one fails in the library
            raise InvalidToken(f"Token algorithm {header['alg']!r} does not fit its key (a {kty} key).")
        options: dict[str, Any] = {
            "iss": {"essential": True, "value": self._config.issuer},
            "aud": {"essential": True, "value": audience or self._config.expected_audience},
            "exp": {"essential": True},
        }
        if nonce is not None:
            options["nonce"] = {"essential": True, "value": nonce}
        try:
            claims = self._jwt.decode(token, key, claims_options=options)
            claims.validate(now=int(self._clock()), leeway=int(self._config.leeway_s))
        except ExpiredTokenError as exc:
            raise InvalidToken("Token has expired.") from exc
        except BadSignatureError as exc:
            raise InvalidToken("Token signature is invalid.") from exc
        except InvalidClaimError as exc:
            raise InvalidToken(_claim_message(exc.claim_name)) from exc
        except MissingClaimError as exc:
            raise InvalidToken(f"Token is incomplete: {exc.description}.") from exc
        except InvalidTokenError as exc:  # nbf in the future, iat in the future
            raise InvalidToken(f"Token is not valid yet ({exc.description}).") from exc
        except (DecodeError, JoseError, ValueError, TypeError) as exc:
            raise InvalidToken("Malformed token.") from exc
        return dict(claims)


_KEY_TYPES = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP", "HS": "oct"}
"""The key type a JWS algorithm family signs with (RFC 7518): the header's ``alg`` must fit the key."""


def _claim_message(name: str) -> str:
    return {
        "aud": "Token has the wrong audience.",
        "iss": "Token has the wrong issuer.",
        "nonce": "ID token nonce does not match the login.",
    }.get(name, f"Token claim {name!r} is invalid.")
