"""The single sign-on errors, in the gateway's error tree (rendered in OpenAI's shape)."""

from __future__ import annotations

from gateway.errors import AuthenticationFailed


class InvalidToken(AuthenticationFailed):
    """A bearer token, a login callback or a console session the gateway does not accept (401)."""

    default_code = "invalid_token"
