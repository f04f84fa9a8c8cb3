"""A small, real OpenID provider for the single sign-on tests, run as its own process on loopback.

Built on authlib's JOSE and aiohttp: discovery, ``/jwks``, ``/authorize`` (auto-approves one configured
user and redirects back with a code), ``/token`` (checks the PKCE verifier, one use per code) and, for
tests only, ``POST /test/rotate`` (a new signing key; the old one stays published) and ``POST
/test/mint`` (a token with given claims, signed by the current key or by a key nobody publishes).

    python -m tests.support.oidc_provider --client-id console --audience sortyard-admin \
        --groups ops-admins            # prints "PORT <n>" once it listens on 127.0.0.1:<n>

``OidcProvider`` starts and stops that process for a test and wraps the test endpoints.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import secrets
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
from aiohttp import web

with warnings.catch_warnings():
    import authlib.deprecate  # noqa: F401  (it turns its own warnings on when imported: first, then off)

    warnings.simplefilter("ignore")
    from authlib.jose import JsonWebKey, jwt

REPO = Path(__file__).resolve().parents[2]


class Provider:
    """The provider's state: signing keys, pending codes, the user it approves."""

    def __init__(self, issuer: str, client_id: str, audience: str, user: dict[str, Any]) -> None:
        self.issuer = issuer
        self.client_id = client_id
        self.audience = audience
        self.user = user
        self.keys: list[Any] = []
        self.codes: dict[str, dict[str, Any]] = {}
        self.num_jwks_fetches = 0
        self.rotate()

    def rotate(self, kty: str = "RSA") -> str:
        """A new current signing key (RSA 2048 or EC P-256); earlier ones stay in the JWKS."""
        kid = f"k{len(self.keys) + 1}-{secrets.token_hex(3)}"
        crv_or_size = "P-256" if kty == "EC" else 2048
        key = JsonWebKey.generate_key(kty, crv_or_size, options={"kid": kid}, is_private=True)
        self.keys.append(key)
        return kid

    def sign(self, claims: dict[str, Any], *, stranger: bool = False, kid: str | None = None) -> str:
        key = self.keys[-1]
        alg = "ES256" if key.kty == "EC" else "RS256"
        header = {"alg": alg, "kid": kid or key.kid}
        if stranger:  # same kid, another key: a forged signature
            key = JsonWebKey.generate_key(key.kty, "P-256" if key.kty == "EC" else 2048, is_private=True)
        if kid is not None:  # authlib writes the key's own kid into the header: rename the key
            key = JsonWebKey.import_key({**key.as_dict(is_private=True), "kid": kid})
        return jwt.encode(header, claims, key).decode()

    def claims(self, aud: str, **extra: Any) -> dict[str, Any]:
        now = int(time.time())
        return {"iss": self.issuer, "aud": aud, "iat": now, "exp": now + 300, **self.user, **extra}


def build_app(provider: Provider) -> web.Application:
    async def discovery(request: web.Request) -> web.Response:
        base = provider.issuer
        return web.json_response(
            {
                "issuer": base,
                "authorization_endpoint": f"{base}/authorize",
                "token_endpoint": f"{base}/token",
                "jwks_uri": f"{base}/jwks",
                "response_types_supported": ["code"],
                "code_challenge_methods_supported": ["S256"],
                "id_token_signing_alg_values_supported": ["RS256", "ES256"],
            }
        )

    async def jwks(request: web.Request) -> web.Response:
        provider.num_jwks_fetches += 1
        return web.json_response({"keys": [k.as_dict(is_private=False) for k in provider.keys]})

    async def authorize(request: web.Request) -> web.Response:
        q = request.query
        if q.get("client_id") != provider.client_id or q.get("response_type") != "code":
            return web.json_response({"error": "unauthorized_client"}, status=400)
        if q.get("code_challenge_method") != "S256" or not q.get("code_challenge"):
            return web.json_response({"error": "invalid_request", "detail": "PKCE S256 required"}, status=400)
        code = secrets.token_urlsafe(16)
        provider.codes[code] = dict(q)
        back = {"code": code, "state": q.get("state", "")}
        raise web.HTTPFound(f"{q['redirect_uri']}?{urlencode(back)}")

    async def token(request: web.Request) -> web.Response:
        form = await request.post()
        pending = provider.codes.pop(str(form.get("code")), None)  # one use
        if pending is None or form.get("redirect_uri") != pending["redirect_uri"]:
            return web.json_response({"error": "invalid_grant"}, status=400)
        digest = hashlib.sha256(str(form.get("code_verifier", "")).encode()).digest()
        if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != pending["code_challenge"]:
            return web.json_response({"error": "invalid_grant", "detail": "PKCE verifier"}, status=400)
        id_token = provider.sign(provider.claims(provider.client_id, nonce=pending.get("nonce")))
        access = provider.sign(provider.claims(provider.audience))
        return web.json_response(
            {"id_token": id_token, "access_token": access, "token_type": "Bearer", "expires_in": 300}
        )

    async def rotate(request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else {}
        return web.json_response({"kid": provider.rotate(body.get("kty", "RSA"))})

    async def mint(request: web.Request) -> web.Response:
        body = await request.json()
        claims = provider.claims(body.get("aud", provider.audience), **body.get("claims", {}))
        for name in body.get("drop", []):
            claims.pop(name, None)
        signed = provider.sign(claims, stranger=body.get("stranger", False), kid=body.get("kid"))
        return web.json_response({"token": signed})

    async def stats(request: web.Request) -> web.Response:
        return web.json_response({"num_jwks_fetches": provider.num_jwks_fetches})

    app = web.Application()
    app.router.add_get("/.well-known/openid-configuration", discovery)
    app.router.add_get("/jwks", jwks)
    app.router.add_get("/authorize", authorize)
    app.router.add_post("/token", token)
    app.router.add_post("/test/rotate", rotate)
    app.router.add_post("/test/mint", mint)
    app.router.add_get("/test/stats", stats)
    return app


async def _serve(args: argparse.Namespace) -> None:
    user = {"sub": args.sub, "preferred_username": args.sub, "groups": args.groups}
    if args.tenant:
        user["tenant"] = args.tenant
    # the issuer names the port, known only once bound: bind first, then build the app on it
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    provider = Provider(f"http://127.0.0.1:{port}", args.client_id, args.audience, user)
    runner = web.AppRunner(build_app(provider))
    await runner.setup()
    await web.SockSite(runner, sock).start()
    print(f"PORT {port}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--client-id", default="console")
    parser.add_argument("--audience", default="sortyard-admin")
    parser.add_argument("--sub", default="alice")
    parser.add_argument("--groups", nargs="*", default=["ops-admins"])
    parser.add_argument("--tenant", default=None)
    asyncio.run(_serve(parser.parse_args()))


class OidcProvider:
    """The provider process, for a test: ``issuer``, plus ``mint``, ``rotate`` and ``stats``."""

    def __init__(self, *args: str) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.oidc_provider", *args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().decode()  # blocks until it listens, or exits
        if not line.startswith("PORT "):
            stderr = self._proc.stderr.read().decode() if self._proc.stderr else ""
            raise AssertionError(f"the OIDC provider did not start: {line!r} {stderr[-2000:]}")
        self.issuer = f"http://127.0.0.1:{int(line.split()[1])}"

    def mint(self, **body: Any) -> str:
        return str(httpx.post(f"{self.issuer}/test/mint", json=body).json()["token"])

    def rotate(self, kty: str = "RSA") -> str:
        return str(httpx.post(f"{self.issuer}/test/rotate", json={"kty": kty}).json()["kid"])

    def num_jwks_fetches(self) -> int:
        return int(httpx.get(f"{self.issuer}/test/stats").json()["num_jwks_fetches"])

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait(timeout=10)
        for pipe in (self._proc.stdout, self._proc.stderr):
            if pipe is not None:
                pipe.close()


if __name__ == "__main__":
    main()
