"""PKCE (RFC 7636): the S256 challenge of a code verifier, by authlib's own implementation."""

from __future__ import annotations

from authlib.oauth2.rfc7636 import create_s256_code_challenge


def s256_challenge(verifier: str) -> str:
    """``base64url(sha256(verifier))`` without padding: what the provider compares at /token."""
    return str(create_s256_code_challenge(verifier))
