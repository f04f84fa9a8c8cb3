"""TLS (server verification, hostname checks, mutual TLS) and ACL logins against real redis-server
processes speaking TLS only, with certificates made by the openssl CLI in the test."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from gateway.cache.blobs import RedisBlobs
from gateway.redis_client.commands import RespCommands
from gateway.redis_client.resp import RedisAuthError, RedisTLSError, RespClient, RespError
from gateway.stores import LimitRule, RedisStore
from tests.gateway.stores.conftest import T0, admission, settlement
from tests.support.redis_tls import Certs, TlsRedis, make_certs
from tools.servers.redis_server import RedisServer

pytestmark = pytest.mark.skipif(
    shutil.which("redis-server") is None or shutil.which("openssl") is None,
    reason="needs redis-server (built with TLS) and openssl",
)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_redis(certs: Certs) -> Iterator[TlsRedis]:
    """TLS only, an ACL user ``gateway`` and a default-user password."""
    server = TlsRedis(certs, users={"gateway": "gw-s3cret"}, default_password="d3fault")
    server.start()
    yield server
    server.stop()


def _query(certs: Certs, ca: Path | None = None, **extra: str) -> str:
    options = {"ssl_ca_certs": str(ca or certs.ca), **extra}
    return "&".join(f"{k}={v}" for k, v in options.items())


@pytest.fixture
async def tls_url(tls_redis: TlsRedis, certs: Certs) -> AsyncIterator[str]:
    url = tls_redis.url(userinfo="gateway:gw-s3cret", query=_query(certs))
    client = RespCommands.from_url(url, connect_timeout_s=5.0)
    await client.resp.execute("FLUSHALL")
    await client.close()
    yield url


async def test_a_store_admits_and_settles_over_tls(tls_url: str) -> None:
    store = RedisStore(tls_url, timeout_s=5.0)
    try:
        rule = LimitRule(scope="key:k1", requests_per_minute=3)
        admissions = [admission(rule, now_s=T0 + i * 0.1, tenant="tls") for i in range(5)]
        decisions = [await store.admit(a) for a in admissions]
        assert [d.allowed for d in decisions] == [True, True, True, False, False]
        await store.settle(settlement(admissions[0], input_tokens=10, output_tokens=5, cost_usd=0.25))
        usage = await store.usage(admissions[0].month, "tls")
        assert usage.tenants["tls"].total.requests == 1
    finally:
        await store.close()


async def test_a_cache_sets_and_gets_over_tls(tls_url: str) -> None:
    blobs = RedisBlobs(tls_url, timeout_s=5.0, name="tls test")
    try:
        assert await blobs.set("sy:c:{x}:1", b"value", ttl_s=60)
        assert await blobs.get("sy:c:{x}:1") == b"value"
        assert not blobs.guard.is_down
    finally:
        await blobs.close()


async def test_a_server_signed_by_another_ca_is_refused_clearly(tls_redis: TlsRedis, certs: Certs) -> None:
    client = RespCommands.from_url(
        tls_redis.url(userinfo="gateway:gw-s3cret", query=_query(certs, ca=certs.other_ca)),
        connect_timeout_s=5.0,
    )
    try:
        with pytest.raises(RedisTLSError, match="certificate verify failed"):
            await client.ping()
    finally:
        await client.close()


async def test_a_hostname_mismatch_is_refused_unless_checking_is_turned_off(tmp_path: Path) -> None:
    certs = make_certs(tmp_path, server_names=("DNS:redis.elsewhere.test",))
    server = TlsRedis(certs)
    server.start()
    checked = RespCommands.from_url(server.url(query=_query(certs)), connect_timeout_s=5.0)
    unchecked = RespCommands.from_url(
        server.url(query=_query(certs, ssl_check_hostname="false")), connect_timeout_s=5.0
    )
    try:
        with pytest.raises(RedisTLSError, match=r"match|mismatch"):
            await checked.ping()
        assert await unchecked.ping()  # same CA, same server: only the name differed
    finally:
        await checked.close()
        await unchecked.close()
        server.stop()


async def test_mutual_tls_needs_the_client_certificate(certs: Certs) -> None:
    server = TlsRedis(certs, require_client_cert=True)
    server.start()
    without = RespCommands.from_url(server.url(query=_query(certs)), connect_timeout_s=5.0)
    with_cert = RespCommands.from_url(
        server.url(
            query=_query(certs, ssl_certfile=str(certs.client_cert), ssl_keyfile=str(certs.client_key))
        ),
        connect_timeout_s=5.0,
    )
    try:
        with pytest.raises(ConnectionError):  # TLS 1.3: the server's refusal arrives after the handshake
            await without.ping()
        assert await with_cert.ping()
        assert await with_cert.set("k", "v") and await with_cert.get("k") == b"v"
    finally:
        await without.close()
        await with_cert.close()
        server.stop()


async def test_an_acl_user_and_the_default_password_log_in(tls_redis: TlsRedis, certs: Certs) -> None:
    user = RespCommands.from_url(tls_redis.url(userinfo="gateway:gw-s3cret", query=_query(certs)))
    default = RespCommands.from_url(tls_redis.url(userinfo=":d3fault", query=_query(certs)))
    try:
        assert await user.resp.execute("ACL", "WHOAMI") == b"gateway"
        assert await default.resp.execute("ACL", "WHOAMI") == b"default"
    finally:
        await user.close()
        await default.close()


async def test_a_wrong_password_fails_clearly(tls_redis: TlsRedis, certs: Certs) -> None:
    client = RespCommands.from_url(tls_redis.url(userinfo="gateway:wrong", query=_query(certs)))
    try:
        with pytest.raises(RedisAuthError, match=r"refused the password of user 'gateway'.*WRONGPASS"):
            await client.ping()
    finally:
        await client.close()


async def test_no_password_gets_noauth(tls_redis: TlsRedis, certs: Certs) -> None:
    client = RespCommands.from_url(tls_redis.url(query=_query(certs)))
    try:
        with pytest.raises(RespError, match="NOAUTH"):
            await client.get("k")
    finally:
        await client.close()


async def test_the_url_db_is_selected_on_every_connection(tls_redis: TlsRedis, certs: Certs) -> None:
    url = tls_redis.url(userinfo="gateway:gw-s3cret", query=_query(certs)).replace("/0?", "/3?")
    client = RespCommands.from_url(url)
    try:
        assert b"db=3" in await client.resp.execute("CLIENT", "INFO")
        await client.resp.execute("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "no")  # drop our connection
        with pytest.raises(ConnectionError):
            await client.ping()
        assert b"db=3" in await client.resp.execute("CLIENT", "INFO")  # reconnected: selected again
    finally:
        await client.close()


def _resp(client: RespCommands) -> RespClient:
    assert isinstance(client.resp, RespClient)
    return client.resp


async def test_failed_logins_back_off(tls_redis: TlsRedis, certs: Certs) -> None:
    client = RespCommands.from_url(tls_redis.url(userinfo="gateway:wrong", query=_query(certs)))
    resp = _resp(client)
    resp.min_backoff_s = resp.max_backoff_s = 3600.0
    try:
        for _ in range(2):  # the first retry is immediate
            with pytest.raises(RedisAuthError):
                await client.ping()
        with pytest.raises(ConnectionError, match="next connect in"):  # backing off: not even tried
            await client.ping()
    finally:
        await client.close()


async def test_a_backoff_is_bounded_and_the_client_comes_back(tls_redis: TlsRedis, certs: Certs) -> None:
    admin = RespCommands.from_url(tls_redis.url(userinfo="gateway:gw-s3cret", query=_query(certs)))
    client = RespCommands.from_url(tls_redis.url(userinfo="late:l4te", query=_query(certs)))
    resp = _resp(client)
    resp.max_backoff_s = 0.2
    try:
        while resp._num_failures < 10:  # long past the doubling: each wait is capped at max_backoff_s
            with contextlib.suppress(ConnectionError):
                await client.ping()
            assert resp._retry_at - time.monotonic() <= resp.max_backoff_s
            await asyncio.sleep(0.01)
        await admin.resp.execute("ACL", "SETUSER", "late", "on", ">l4te", "~*", "+@all")  # now it exists
        async with asyncio.timeout(30):  # a condition, not a timing: it logs in once the wait ends
            while True:
                if await _answers(client):
                    break
                await asyncio.sleep(0.02)
        assert resp._num_failures == 0
    finally:
        await admin.resp.execute("ACL", "DELUSER", "late")
        await admin.close()
        await client.close()


async def test_a_restarted_redis_is_used_at_once(own_redis: RedisServer) -> None:
    """A refused connect costs nothing: no backoff, the first call after the restart connects."""
    client = RespCommands.from_url(own_redis.url, connect_timeout_s=1.0)
    resp = _resp(client)
    try:
        assert await client.ping()
        own_redis.stop()
        while resp._num_failures < 5:
            with pytest.raises(ConnectionError):
                await client.ping()
        own_redis.start()
        assert await client.ping()
    finally:
        await client.close()


async def _answers(client: RespCommands) -> bool:
    try:
        return await client.ping()
    except ConnectionError:
        return False
