"""Response compression: Accept-Encoding negotiation, the size threshold, the encoders and the config."""

from __future__ import annotations

import gzip
import json

import brotli
import pytest
import zstandard

from gateway.compression import (
    Coding,
    CompressionConfig,
    Compressor,
    choose_coding,
    parse_accept_encoding,
)
from gateway.policy import PolicyError, parse_policy

ALL: tuple[Coding, ...] = ("zstd", "br", "gzip")
BODY = json.dumps(
    {"choices": [{"message": {"content": " ".join(f"word{i % 50}" for i in range(600))}}]}
).encode()
DECODERS = {
    "zstd": lambda data: zstandard.ZstdDecompressor().decompress(data),
    "br": brotli.decompress,
    "gzip": gzip.decompress,
}


def test_parse_reads_codings_and_q_values() -> None:
    assert parse_accept_encoding("gzip, deflate, br") == {"gzip": 1.0, "deflate": 1.0, "br": 1.0}
    assert parse_accept_encoding(" GZIP ;Q=0.5 ,br;q=1.0, *;q=0") == {"gzip": 0.5, "br": 1.0, "*": 0.0}
    assert parse_accept_encoding("x-gzip") == {"gzip": 1.0}
    assert parse_accept_encoding("gzip;level=1;q=0.2") == {"gzip": 0.2}


@pytest.mark.parametrize("bad", ["gzip;q=2", "gzip;q=-0.1", "gzip;q=abc", "gzip;q=nan", "gzip;q="])
def test_parse_leaves_out_an_entry_with_a_bad_q_value(bad: str) -> None:
    assert parse_accept_encoding(bad + ", br") == {"br": 1.0}


def test_parse_skips_empty_entries() -> None:
    assert parse_accept_encoding(" , ,gzip,,") == {"gzip": 1.0}


@pytest.mark.parametrize(
    ("header", "chosen"),
    [
        (None, None),  # no header: identity
        ("", None),  # an empty header asks for identity
        ("identity", None),
        ("gzip", "gzip"),
        ("br", "br"),
        ("zstd", "zstd"),
        ("gzip, deflate", "gzip"),
        ("gzip, deflate, br", "br"),  # what the openai SDK sends: equal q, the server's order
        ("gzip, deflate, br, zstd", "zstd"),
        ("br;q=0.8, gzip", "gzip"),  # the client's q-values come before the server's order
        ("zstd;q=0.1, br;q=0.5, gzip;q=0.4", "br"),
        ("gzip;q=0", None),  # q=0: not acceptable
        ("zstd;q=0, br;q=0, gzip", "gzip"),
        ("deflate, compress, foo", None),  # nothing offered
        ("*", "zstd"),
        ("*;q=0.5, gzip", "gzip"),
        ("*, zstd;q=0", "br"),
        ("*;q=0", None),
        ("identity;q=1, gzip;q=0.5", None),  # identity preferred strictly
        ("identity, gzip", "gzip"),  # a tie compresses
        ("identity;q=0, gzip;q=0.1", "gzip"),
        ("x-gzip", "gzip"),
        ("BR", "br"),
    ],
)
def test_choose_coding(header: str | None, chosen: Coding | None) -> None:
    assert choose_coding(header, ALL) == chosen


def test_choose_coding_offers_only_the_configured_codings_in_their_order() -> None:
    assert choose_coding("gzip, br, zstd", ("gzip", "br")) == "gzip"
    assert choose_coding("zstd", ("gzip",)) is None
    assert choose_coding("*", ("br", "gzip")) == "br"


def test_compressor_remembers_choices_in_a_bounded_memo() -> None:
    compressor = Compressor(CompressionConfig(enabled=True))
    for i in range(1000):
        assert compressor.choose(f"gzip;q=0.{i % 9 + 1}, custom{i}") == "gzip"
    assert len(compressor._chosen) <= 256
    assert compressor.choose("br") == "br" and compressor.choose("br") == "br"


@pytest.mark.parametrize("coding", ALL)
async def test_encode_compresses_above_the_threshold(coding: Coding) -> None:
    compressor = Compressor(CompressionConfig(enabled=True, min_size_bytes=1024))
    headers: list[tuple[bytes, bytes]] = []
    encoded = await compressor.encode(BODY, coding, headers)
    assert headers == [(b"vary", b"accept-encoding"), (b"content-encoding", coding.encode())]
    assert len(encoded) < len(BODY)
    assert DECODERS[coding](encoded) == BODY


async def test_encode_leaves_a_body_below_the_threshold_alone_without_vary() -> None:
    compressor = Compressor(CompressionConfig(enabled=True, min_size_bytes=len(BODY) + 1))
    headers: list[tuple[bytes, bytes]] = []
    assert await compressor.encode(BODY, "gzip", headers) is BODY
    assert headers == []


async def test_encode_at_exactly_the_threshold_compresses() -> None:
    compressor = Compressor(CompressionConfig(enabled=True, min_size_bytes=len(BODY)))
    headers: list[tuple[bytes, bytes]] = []
    assert gzip.decompress(await compressor.encode(BODY, "gzip", headers)) == BODY


@pytest.mark.parametrize("header", [None, "", "identity", "deflate", "gzip;q=0"])
async def test_encode_sends_vary_but_no_coding_when_none_is_accepted(header: str | None) -> None:
    compressor = Compressor(CompressionConfig(enabled=True, min_size_bytes=0))
    headers: list[tuple[bytes, bytes]] = []
    assert await compressor.encode(BODY, header, headers) is BODY
    assert headers == [(b"vary", b"accept-encoding")]


@pytest.mark.parametrize("coding", ALL)
async def test_encode_keeps_a_body_its_coding_would_not_shrink(coding: Coding) -> None:
    compressor = Compressor(CompressionConfig(enabled=True, min_size_bytes=0))
    headers: list[tuple[bytes, bytes]] = []
    tiny = b'{"a":1}'  # the coding's frame alone is about as long
    assert await compressor.encode(tiny, coding, headers) is tiny
    assert headers == [(b"vary", b"accept-encoding")]


@pytest.mark.parametrize("coding", ALL)
async def test_encode_moves_a_large_body_to_a_thread_and_it_decodes(coding: Coding) -> None:
    big = BODY * 100  # over the 128 KiB the event loop keeps
    assert len(big) > 128 * 1024
    compressor = Compressor(CompressionConfig(enabled=True))
    headers: list[tuple[bytes, bytes]] = []
    encoded = await compressor.encode(big, coding, headers)
    assert (b"content-encoding", coding.encode()) in headers
    assert DECODERS[coding](encoded) == big


def test_levels_apply() -> None:
    fast = Compressor(CompressionConfig(enabled=True, gzip_level=1, br_quality=0, zstd_level=1))
    best = Compressor(CompressionConfig(enabled=True, gzip_level=9, br_quality=11, zstd_level=19))
    for coding in ALL:
        assert len(best.encode_apart(coding, BODY)) <= len(fast.encode_apart(coding, BODY))


def test_off_by_default_and_built_only_when_on() -> None:
    assert CompressionConfig().enabled is False
    assert CompressionConfig().build() is None
    assert isinstance(CompressionConfig(enabled=True).build(), Compressor)


def _policy(compression: object) -> dict[str, object]:
    return {
        "pools": {"s": {"replicas": [{"base_url": "http://x", "model": "m"}]}},
        "compression": compression,
    }


def test_the_policy_section_parses_and_compiles() -> None:
    from gateway.compiled import compile_policy

    policy = parse_policy(
        _policy({"enabled": True, "min_size_bytes": 2048, "encodings": ["gzip", "br"], "gzip_level": 5}),
        "test",
    )
    config = policy.compression
    assert (config.enabled, config.min_size_bytes, config.encodings, config.gzip_level) == (
        True,
        2048,
        ("gzip", "br"),
        5,
    )
    compressor = compile_policy(policy).compression
    assert compressor is not None and compressor.choose("br, gzip, zstd") == "gzip"
    assert compile_policy(parse_policy(_policy({}), "test")).compression is None


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"encodings": ["deflate"]}, "compression.encodings[0]"),
        ({"encodings": []}, "compression.encodings"),
        ({"encodings": ["gzip", "gzip"]}, "each coding at most once"),
        ({"min_size_bytes": -1}, "compression.min_size_bytes"),
        ({"gzip_level": 0}, "compression.gzip_level"),
        ({"br_quality": 12}, "compression.br_quality"),
        ({"zstd_level": 20}, "compression.zstd_level"),
        ({"level": 3}, "unknown field `level`"),
    ],
)
def test_the_policy_section_refuses_bad_values(section: dict[str, object], message: str) -> None:
    with pytest.raises(PolicyError, match=message.replace("[", r"\[")):
        parse_policy(_policy(section), "test")
