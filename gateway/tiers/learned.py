"""The learned tier classifier: model file format and numpy inference (torch is never imported).

Model file (``router.bin``), all integers big-endian::

    offset  size  field
    0       8     magic  b"SYROUTER"
    8       2     format version (1)
    10      2     reserved (0)
    12      8     payload length in bytes
    20      32    sha256 of the payload
    52      ...   payload: msgspec MessagePack of :class:`ModelPayload` (arrays as raw little-endian bytes)

No pickle anywhere: loading a file can fail, never execute code. The network is a one-hidden-layer
MLP over the hashed features of :mod:`gateway.tiers.features`::

    h = relu(sum_i v_i * embed[i] + ((dense - mean) / std) @ dense_w + b1)
    p = softmax((h @ w2 + b2) / temperature)

``temperature`` is fitted on a validation split at training time (calibration).
"""

from __future__ import annotations

import hashlib
import importlib.resources
import struct
from collections.abc import Collection
from pathlib import Path

import msgspec
import numpy as np
import numpy.typing as npt

from gateway.tiers.classifier import (
    ClassifierLoadError,
    ClassifyInput,
    PoolMap,
    PromptView,
    TierDecision,
    header_safe,
)
from gateway.tiers.config import LearnedConfig
from gateway.tiers.features import FeatureConfig, Featurizer

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "Array",
    "LearnedClassifier",
    "LearnedModel",
    "ModelPayload",
    "decode_model",
    "default_model_path",
    "encode_model",
    "read_model",
    "write_model",
]

MAGIC = b"SYROUTER"
FORMAT_VERSION = 1
_HEADER = struct.Struct(">8sHHQ32s")
_ARRAY_NAMES = ("embed", "dense_w", "b1", "w2", "b2", "dense_mean", "dense_std")


class Array(msgspec.Struct, frozen=True):
    """A numpy array as bytes: ``dtype`` is a little-endian numpy dtype string such as ``<f2``."""

    dtype: str
    shape: list[int]
    data: bytes

    @classmethod
    def of(cls, array: npt.NDArray, dtype: str = "<f4") -> Array:
        a = np.ascontiguousarray(array, dtype=np.dtype(dtype))
        return cls(dtype=dtype, shape=list(a.shape), data=a.tobytes())

    def to_numpy(self) -> npt.NDArray[np.float32]:
        if self.dtype not in ("<f2", "<f4"):
            raise ValueError(f"unsupported dtype {self.dtype}")
        a = np.frombuffer(self.data, dtype=np.dtype(self.dtype))
        return a.reshape(self.shape).astype(np.float32)


class ModelPayload(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a trained model is: tiers, featurisation, weights, calibration, provenance."""

    tiers: list[str]
    """Labels from the cheapest tier to the largest; the output order of the network."""
    features: FeatureConfig
    """The featurisation the model was trained with."""
    temperature: float
    """Softmax temperature fitted on the validation split."""
    arrays: dict[str, Array]
    """embed (buckets x hidden), dense_w (dense x hidden), b1, w2 (hidden x tiers), b2,
    dense_mean, dense_std."""
    dense_names: list[str] = []
    """Names of the dense features, checked against what this build computes for ``features``."""
    metrics: dict[str, float] = {}
    """Held-out accuracy, ECE and sizes, as printed by ``router train``."""
    info: dict[str, str] = {}
    """Provenance: training file, sha256 of the data, command line."""


def encode_model(payload: ModelPayload) -> bytes:
    body = msgspec.msgpack.encode(payload)
    return _HEADER.pack(MAGIC, FORMAT_VERSION, 0, len(body), hashlib.sha256(body).digest()) + body


def write_model(path: str | Path, payload: ModelPayload) -> None:
    """Write atomically (temp file + rename) so a gateway never reads half a model."""
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_bytes(encode_model(payload))
    tmp.replace(target)


def decode_model(blob: bytes, *, source: str = "<bytes>") -> ModelPayload:
    """Check magic, version, length and checksum, then decode; :class:`ClassifierLoadError` on any fault."""
    if len(blob) < _HEADER.size:
        raise ClassifierLoadError(
            f"router model {source} is corrupt: {len(blob)} bytes is shorter than the header"
        )
    magic, version, _reserved, length, checksum = _HEADER.unpack_from(blob)
    if magic != MAGIC:
        raise ClassifierLoadError(
            f"router model {source} is not a Sortyard router model (bad magic {magic!r})"
        )
    if version != FORMAT_VERSION:
        raise ClassifierLoadError(
            f"router model {source} has format version {version}; this gateway reads version "
            f"{FORMAT_VERSION}. Retrain it with `sortyard router train`."
        )
    body = blob[_HEADER.size :]
    if len(body) != length:
        raise ClassifierLoadError(
            f"router model {source} is corrupt or truncated: "
            f"payload is {len(body)} bytes, header says {length}"
        )
    if hashlib.sha256(body).digest() != checksum:
        raise ClassifierLoadError(f"router model {source} is corrupt: checksum mismatch")
    try:
        return msgspec.msgpack.decode(body, type=ModelPayload)
    except msgspec.DecodeError as exc:  # ValidationError is a subclass
        raise ClassifierLoadError(f"router model {source} is not decodable: {exc}") from exc


def default_model_path() -> Path:
    """The shipped model, ``gateway/tiers/data/router.bin``."""
    return Path(str(importlib.resources.files("gateway.tiers").joinpath("data", "router.bin")))


def read_model(path: str | Path | None = None) -> ModelPayload:
    """Read and verify a model file (``None``: the shipped default)."""
    file = Path(path) if path is not None else default_model_path()
    try:
        blob = file.read_bytes()
    except FileNotFoundError:
        raise ClassifierLoadError(
            f"router model file {str(file)!r} does not exist; train one with "
            "`sortyard router train data.jsonl -o router.bin` or drop `path` to use the shipped default"
        ) from None
    except OSError as exc:
        raise ClassifierLoadError(f"router model file {str(file)!r} cannot be read: {exc}") from exc
    return decode_model(blob, source=repr(str(file)))


class LearnedModel:
    """A loaded model: ``predict(text)`` gives calibrated tier probabilities in ``tiers`` order."""

    def __init__(self, payload: ModelPayload, *, source: str = "<model>") -> None:
        try:
            self.featurizer = Featurizer(payload.features)
        except ValueError as exc:
            raise ClassifierLoadError(f"router model {source} is incompatible: {exc}") from exc
        missing = [n for n in _ARRAY_NAMES if n not in payload.arrays]
        if missing:
            raise ClassifierLoadError(f"router model {source} is corrupt: arrays {missing} are missing")
        dense_names = list(self.featurizer.dense_names)
        if payload.dense_names and list(payload.dense_names) != dense_names:
            raise ClassifierLoadError(
                f"router model {source} is incompatible: trained on dense features "
                f"{payload.dense_names}, this build computes {dense_names}; retrain it"
            )
        try:
            arrays = {n: payload.arrays[n].to_numpy() for n in _ARRAY_NAMES}
        except ValueError as exc:
            raise ClassifierLoadError(f"router model {source} is corrupt: {exc}") from exc
        num_tiers, num_dense = len(payload.tiers), self.featurizer.num_dense
        num_buckets = payload.features.num_buckets
        hidden = arrays["b1"].shape[0] if arrays["b1"].ndim == 1 else -1
        expected = {
            "embed": (num_buckets, hidden),
            "dense_w": (num_dense, hidden),
            "b1": (hidden,),
            "w2": (hidden, num_tiers),
            "b2": (num_tiers,),
            "dense_mean": (num_dense,),
            "dense_std": (num_dense,),
        }
        wrong = {n: (arrays[n].shape, shape) for n, shape in expected.items() if arrays[n].shape != shape}
        if wrong or num_tiers < 2 or len(set(payload.tiers)) != num_tiers:
            raise ClassifierLoadError(
                f"router model {source} is corrupt: array shapes {wrong} or tiers {payload.tiers} do not fit"
            )
        if not all(np.isfinite(a).all() for a in arrays.values()) or not payload.temperature > 0:
            raise ClassifierLoadError(f"router model {source} is corrupt: non-finite weights or temperature")
        self.tiers = list(payload.tiers)
        self.metrics = dict(payload.metrics)
        self._embed = arrays["embed"]
        # Fold standardisation into the dense layer: (x - m) / s @ W = x @ (W / s) - (m / s) @ W.
        std = np.where(arrays["dense_std"] > 0, arrays["dense_std"], 1.0)
        self._dense_w = arrays["dense_w"] / std[:, None]
        self._b1 = arrays["b1"] - (arrays["dense_mean"] / std) @ arrays["dense_w"]
        self._w2 = arrays["w2"] / payload.temperature
        self._b2 = arrays["b2"] / payload.temperature

    @classmethod
    def load(cls, path: str | Path | None = None) -> LearnedModel:
        source = repr(str(path)) if path is not None else "(shipped default)"
        return cls(read_model(path), source=source)

    def predict(self, text: str) -> npt.NDArray[np.float32]:
        feats = self.featurizer(text)
        # einsum's own C loop, not BLAS: OpenBLAS may thread a long gemv, and its spin-waiting
        # threads turn a 0.3 ms call into several ms at p99 on a busy host. The small products are
        # below OpenBLAS's threading threshold.
        rows = np.take(self._embed, feats.indices, axis=0)  # ~3x faster than fancy indexing
        h = np.einsum("i,ij->j", feats.values, rows)
        h += feats.dense @ self._dense_w + self._b1
        np.maximum(h, 0.0, out=h)
        logits = h @ self._w2 + self._b2
        e = np.exp(logits - logits.max())
        return e / e.sum()


class LearnedClassifier:
    """Routes by the model's calibrated probabilities and the policy's cost/quality thresholds."""

    def __init__(
        self, config: LearnedConfig, model: LearnedModel, *, pools: Collection[str] | None = None
    ) -> None:
        self.config = config
        self.model = model
        self._pools = PoolMap(config, model.tiers, pools)
        unknown = set(config.thresholds) - set(model.tiers[1:])
        if unknown:
            raise ClassifierLoadError(
                f"thresholds name {sorted(unknown)}, which are not tiers above the cheapest of this model "
                f"({model.tiers[1:]})"
            )
        # cost_quality 0 must never leave the cheapest tier, even when a probability rounds to 1.0.
        default = 1.0 - config.cost_quality if config.cost_quality > 0 else float("inf")
        # Largest tier first: a request goes to the largest tier whose "this or larger" probability clears it.
        self._thresholds = [
            (i, config.thresholds.get(tier, default))
            for i, tier in reversed(list(enumerate(model.tiers)))
            if i > 0
        ]

    @classmethod
    def load(cls, config: LearnedConfig, *, pools: Collection[str] | None = None) -> LearnedClassifier:
        return cls(config, LearnedModel.load(config.path), pools=pools)

    def classify(self, request: ClassifyInput) -> TierDecision:
        view = PromptView.of(request)
        if not view.text.strip():
            return TierDecision(pool=self._pools.fallback, reason="learned empty-prompt fallback")
        probs = self.model.predict(view.text)
        tiers = self.model.tiers
        at_least = np.cumsum(probs[::-1])[::-1]  # at_least[i] = p(tier i or larger)
        chosen = 0
        for i, threshold in self._thresholds:
            if at_least[i] >= threshold and at_least[i] > 0.0:
                chosen = i
                break
        pool = self._pools.pool(tiers[chosen])
        return TierDecision(
            pool=pool,
            reason=header_safe(f"learned p({tiers[chosen]})={float(probs[chosen]):.2f}"),
            probabilities=self._pools.probabilities(dict(zip(tiers, probs.tolist(), strict=True))),
        )
