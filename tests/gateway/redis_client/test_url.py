"""Redis URLs as redis-py spells them: TLS options, ACL credentials, db, Sentinel and Cluster forms."""

from __future__ import annotations

import ssl

import pytest

from gateway.redis_client.url import parse_url


def test_a_plain_url_with_an_acl_user_and_a_db() -> None:
    target = parse_url("redis://gateway:p%40ss@redis.internal:6380/2")
    assert (target.mode, target.addresses, target.db) == ("single", (("redis.internal", 6380),), 2)
    assert (target.username, target.password, target.tls) == ("gateway", "p@ss", None)


def test_a_password_alone_and_the_defaults() -> None:
    target = parse_url("redis://:s3cret@localhost")
    assert (target.username, target.password, target.addresses, target.db) == (
        None,
        "s3cret",
        (("localhost", 6379),),
        0,
    )
    assert parse_url("redis://h?db=4").db == 4


def test_rediss_verifies_the_server_and_its_name_by_default() -> None:
    context = parse_url("rediss://h:6380/0").tls
    assert context is not None
    assert (context.verify_mode, context.check_hostname) == (ssl.CERT_REQUIRED, True)
    off = parse_url("rediss://h/0?ssl_cert_reqs=none").tls
    assert off is not None and (off.verify_mode, off.check_hostname) == (ssl.CERT_NONE, False)
    unnamed = parse_url("rediss://h/0?ssl_check_hostname=false").tls
    assert unnamed is not None and (unnamed.verify_mode, unnamed.check_hostname) == (ssl.CERT_REQUIRED, False)


def test_sentinel_urls_name_the_service_and_many_sentinels() -> None:
    target = parse_url("redis+sentinel://:pw@s1:26379,s2,[::1]:26380/mymaster/1?sentinel_password=spw")
    assert target.mode == "sentinel"
    assert target.addresses == (("s1", 26379), ("s2", 26379), ("::1", 26380))
    assert (target.service, target.db, target.password, target.sentinel_password) == (
        "mymaster",
        1,
        "pw",
        "spw",
    )
    sentinel = target.sentinel(("s1", 26379))
    assert (sentinel.mode, sentinel.password, sentinel.db) == ("single", "spw", 0)
    assert parse_url("rediss+sentinel://s1/m").tls is not None


def test_cluster_urls_list_seed_nodes() -> None:
    target = parse_url("redis+cluster://u:p@n1:7000,n2:7001")
    assert (target.mode, target.addresses, target.username) == ("cluster", (("n1", 7000), ("n2", 7001)), "u")
    node = target.node(("n3", 7002))
    assert (node.mode, node.addresses, node.username, node.password) == ("single", (("n3", 7002),), "u", "p")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://h", "unsupported Redis URL scheme"),
        ("h:6379", "starts with redis://"),
        ("redis://h?ssl_ca_certs=/x", "need a TLS scheme"),
        ("redis://h?sslcacerts=/x", "unknown Redis URL option"),
        ("redis+sentinel://s1:26379", "names the primary"),
        ("redis+cluster://n1:7000/1", "only db 0"),
        ("redis://a,b", "names one host"),
        ("rediss://h?ssl_cert_reqs=maybe", "ssl_cert_reqs"),
    ],
)
def test_bad_urls_say_what_is_wrong(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_url(url)


def test_errors_never_echo_the_password() -> None:
    with pytest.raises(ValueError) as caught:
        parse_url("redis://u:topsecret@h?bogus=1")
    assert "topsecret" not in str(caught.value)
