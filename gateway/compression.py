"""Response compression: the coding a client accepts (``Accept-Encoding``), and the encoding itself.

Only complete (non-streaming) bodies are compressed, by the one place that sends them
(``gateway.proxy``); server-sent event streams never pass here, so their flushes stay as they are.
The config builds the feature once per policy (``CompressionConfig.build`` -> ``Compressor``)::

    compression: {enabled: true, min_size_bytes: 1024, encodings: [zstd, gzip, br]}

A body shorter than ``min_size_bytes`` goes out as it is, whoever asks (and without ``Vary``: it
never varies). A longer one gets ``Vary: Accept-Encoding`` and, when the client accepts one of the
``encodings``, is encoded with the one it gives the highest q-value, ties going to the earlier in
``encodings``; an encoding no smaller than the body is dropped. Bodies reach here as identity: the
upstream client asks for ``Accept-Encoding: identity`` and never decodes (``gateway.replicas.client``),
and every body sent is JSON the gateway parsed (an encoded upstream answer fails as
``upstream_protocol_error``) or rendered itself, so nothing is ever encoded twice.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable, Sequence
from typing import Annotated, Literal

import brotli
import msgspec
import zstandard

__all__ = ["Coding", "CompressionConfig", "Compressor", "choose_coding", "parse_accept_encoding"]

Coding = Literal["zstd", "br", "gzip"]

_TOKENS: dict[Coding, bytes] = {"zstd": b"zstd", "br": b"br", "gzip": b"gzip"}
_ALIASES = {"x-gzip": "gzip"}  # RFC 9110 8.4.1.3: x-gzip is gzip
_VARY = (b"vary", b"accept-encoding")
_CONTENT_ENCODING = b"content-encoding"
_OFFLOAD_BYTES = 128 * 1024
"""Bodies this large are encoded on a thread (zlib, zstd and brotli release the GIL): 128 KiB of
embeddings takes 0.6 ms (zstd) to 6 ms (gzip), which would stall every request on the loop; a thread
hand-off costs ~50 us of CPU, too much for the usual few-KB answer."""
_MAX_MEMO = 256
"""Distinct ``Accept-Encoding`` values remembered (clients send a handful; the memo is bounded)."""


class CompressionConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Compression of complete (non-streaming) responses; the policy's ``compression:`` section."""

    enabled: bool = False
    """Compress responses for clients that ask. Off by default, as in nginx and Envoy: most clients of
    an LLM gateway sit in the same network, where bytes are cheap and CPU is the gateway's limit."""
    min_size_bytes: Annotated[int, msgspec.Meta(ge=0)] = 1024
    """Bodies shorter than this are never compressed (nor are they sent with ``Vary``): below about a
    kilobyte the saving is a packet at most, and the encoder's framing eats part of it."""
    encodings: Annotated[tuple[Coding, ...], msgspec.Meta(min_length=1)] = ("zstd", "gzip", "br")
    """The codings offered, most preferred first: when a client accepts several with the same
    q-value, the earliest here wins. gzip before br: inside the gateway br cost 3x gzip's CPU per
    answer for the same size (docs/benchmarks.md), and the openai SDK offers both."""
    zstd_level: Annotated[int, msgspec.Meta(ge=1, le=19)] = 3
    """zstd's level (3 is zstd's own default: ~10 us for a 2.7 KB answer)."""
    br_quality: Annotated[int, msgspec.Meta(ge=0, le=11)] = 4
    """Brotli's quality; its own default, 11, takes ~3 ms for a 2.7 KB answer, 4 about 40 us."""
    gzip_level: Annotated[int, msgspec.Meta(ge=1, le=9)] = 6
    """gzip's level (6 is zlib's default)."""

    def __post_init__(self) -> None:
        if len(set(self.encodings)) != len(self.encodings):
            raise ValueError(f"encodings: each coding at most once, got {list(self.encodings)}")

    def build(self) -> Compressor | None:
        """The feature, or None when it is off (then nothing on the send path looks further)."""
        return Compressor(self) if self.enabled else None


def parse_accept_encoding(header: str) -> dict[str, float]:
    """The codings an ``Accept-Encoding`` value names, lower case, with their q-values (1 when not
    given); an entry whose q-value is not a number from 0 to 1 is left out."""
    weights: dict[str, float] = {}
    for entry in header.split(","):
        name, _, params = entry.partition(";")
        name = name.strip().lower()
        if not name:
            continue
        q = 1.0
        for param in params.split(";"):
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value.strip())
                except ValueError:
                    q = -1.0
        if not 0.0 <= q <= 1.0:  # also NaN
            continue
        weights[_ALIASES.get(name, name)] = q
    return weights


def choose_coding(header: str | None, offered: Sequence[Coding]) -> Coding | None:
    """The coding to answer an ``Accept-Encoding`` value with, or None for the body as it is.

    No header, or an empty one, asks for identity. Each offered coding gets its own q-value, else
    ``*``'s, else 0 (not acceptable); the highest above 0 wins, ties going to the earlier offered. An
    ``identity`` (or ``*``) the client prefers strictly over that coding keeps the body as it is.
    """
    if not header:
        return None
    weights = parse_accept_encoding(header)
    star = weights.get("*", 0.0)
    best: Coding | None = None
    best_q = 0.0
    for coding in offered:
        q = weights.get(coding, star)
        if q > best_q:
            best, best_q = coding, q
    if best is not None and weights.get("identity", star) > best_q:
        return None
    return best


class Compressor:
    """Encodes a complete body for the client that asked, built once per policy
    (``CompressionConfig.build``); used on the event loop only."""

    def __init__(self, config: CompressionConfig) -> None:
        self.config = config
        self.min_size_bytes = config.min_size_bytes
        zstd = zstandard.ZstdCompressor(level=config.zstd_level)  # reused: not safe across threads
        self._encoders: dict[Coding, Callable[[bytes], bytes]] = {
            "zstd": zstd.compress,
            "br": self._brotli,
            "gzip": self._gzip,
        }
        self._chosen: dict[str, Coding | None] = {}

    def choose(self, accept_encoding: str | None) -> Coding | None:
        """``choose_coding`` over this policy's encodings, remembered per header value."""
        if not accept_encoding:
            return None
        try:
            return self._chosen[accept_encoding]
        except KeyError:
            pass
        coding = choose_coding(accept_encoding, self.config.encodings)
        if len(self._chosen) >= _MAX_MEMO:
            self._chosen.clear()
        self._chosen[accept_encoding] = coding
        return coding

    async def encode(
        self, body: bytes, accept_encoding: str | None, headers: list[tuple[bytes, bytes]]
    ) -> bytes:
        """The body to send: encoded when it is long enough and the client accepts a coding, with
        ``Vary`` and ``Content-Encoding`` appended to ``headers`` as they apply."""
        if len(body) < self.min_size_bytes:
            return body
        headers.append(_VARY)
        coding = self.choose(accept_encoding)
        if coding is None:
            return body
        if len(body) >= _OFFLOAD_BYTES:
            encoded = await asyncio.to_thread(self.encode_apart, coding, body)
        else:
            encoded = self._encoders[coding](body)
        if len(encoded) >= len(body):  # incompressible: the client would decode for nothing
            return body
        headers.append((_CONTENT_ENCODING, _TOKENS[coding]))
        return encoded

    def encode_apart(self, coding: Coding, body: bytes) -> bytes:
        """``body`` encoded with ``coding``, safe on any thread (a zstd context of its own)."""
        if coding == "zstd":
            return zstandard.ZstdCompressor(level=self.config.zstd_level).compress(body)
        return self._encoders[coding](body)

    def _brotli(self, body: bytes) -> bytes:
        return brotli.compress(body, quality=self.config.br_quality)

    def _gzip(self, body: bytes) -> bytes:
        return zlib.compress(body, self.config.gzip_level, wbits=31)  # 31: the gzip container
