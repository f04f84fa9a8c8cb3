"""``sortyard router train data.jsonl -o router.bin``: train the learned tier classifier with torch.

This is the only module of the gateway that imports torch, and only inside :func:`train_main`;
the model it writes is read by :mod:`gateway.tiers.learned` with numpy alone.

Data: JSONL, one ``{"prompt": str, "tier": str, "group": str?, "weight": float?}`` a line (other
fields are ignored; ``python -m tools.tiers.corpus`` writes the shipped model's). ``group``
(e.g. a near-duplicate cluster) keeps near-duplicates on one side of every split, so the held-out
accuracy measures generalisation rather than memory; ``weight`` scales the row's share of the loss.
Splits (by group, seeded): ``--holdout`` for the reported accuracy, then ``--val`` of the rest for
early stopping and temperature scaling (calibration). The saved model is the one trained on the
training split, and its held-out figures are measured through the numpy inference path, after
float16 storage, exactly as it will serve.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import msgspec
import numpy as np
import numpy.typing as npt

from gateway.tiers.config import DEFAULT_TIERS
from gateway.tiers.features import FeatureConfig, Featurizer, SparseFeatures
from gateway.tiers.learned import Array, LearnedModel, ModelPayload, write_model

__all__ = ["Example", "expected_calibration_error", "load_examples", "split_by_group", "train_main"]


class Example(msgspec.Struct, frozen=True):
    """One labelled prompt."""

    prompt: str
    tier: str
    group: str | None = None
    weight: float = 1.0
    """How much the row counts in the loss (relative to 1)."""


class DataError(ValueError):
    """The training file is unusable (message names the line)."""


def load_examples(path: Path) -> list[Example]:
    decoder = msgspec.json.Decoder(Example)
    examples = []
    try:
        lines = path.read_bytes().splitlines()
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc}") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            example = decoder.decode(line)
        except msgspec.DecodeError as exc:
            raise DataError(f"{path}:{number}: expected {{'prompt': str, 'tier': str}}: {exc}") from exc
        if not example.prompt.strip():
            raise DataError(f"{path}:{number}: empty prompt")
        examples.append(example)
    if not examples:
        raise DataError(f"{path} has no examples")
    return examples


def split_by_group(
    examples: Sequence[Example], fraction: float, rng: random.Random
) -> tuple[list[Example], list[Example]]:
    """(rest, split-off) where the split-off part holds about ``fraction`` of the rows, whole groups only."""
    groups: dict[str, list[Example]] = {}
    for i, ex in enumerate(examples):
        groups.setdefault(ex.group or f"#row{i}", []).append(ex)
    keys = sorted(groups)
    rng.shuffle(keys)
    target = fraction * len(examples)
    rest: list[Example] = []
    split: list[Example] = []
    for key in keys:
        (split if len(split) < target else rest).extend(groups[key])
    return rest, split


def expected_calibration_error(probs: npt.NDArray, labels: npt.NDArray, num_bins: int = 10) -> float:
    """ECE of the top-class confidence over equal-width bins."""
    confidence = probs.max(axis=1)
    correct = probs.argmax(axis=1) == labels
    bins = np.minimum((confidence * num_bins).astype(int), num_bins - 1)
    ece = 0.0
    for b in range(num_bins):
        mask = bins == b
        if mask.any():
            ece += mask.mean() * abs(correct[mask].mean() - confidence[mask].mean())
    return float(ece)


def _parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="sortyard router train", description=__doc__.split("\n")[0])
    p.add_argument("data", type=Path, help="JSONL of {prompt, tier[, group, weight]}")
    p.add_argument("-o", "--output", type=Path, required=True, help="model file to write (router.bin)")
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--holdout", type=float, default=0.2, help="fraction held out for the reported accuracy")
    p.add_argument(
        "--val", type=float, default=0.25, help="fraction of the rest for early stopping and calibration"
    )
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--dropout", type=float, default=0.3, help="dropout on the hidden layer")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--no-cues", action="store_true", help="leave out the request-cue feature (cues.py)")
    p.add_argument(
        "--max-chars",
        type=int,
        default=3000,
        help="longer prompts are hashed on their first 2/3 and last 1/3 of this many characters",
    )
    p.add_argument(
        "--lead-words", type=int, default=16, help="opening words hashed again as their own group (0: off)"
    )
    p.add_argument(
        "--tiers", default=None, help="comma-separated tiers, cheapest first (default small,medium,large)"
    )
    return p.parse_args(argv)


def train_main(argv: list[str]) -> int:
    """Entry point of ``sortyard router train``; returns the exit status."""
    args = _parse_args(argv)
    try:
        return _train(args)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _train(args: argparse.Namespace) -> int:
    import torch  # only here: the gateway never imports torch

    started = time.perf_counter()
    torch.set_num_threads(1)  # tiny model: threads only add contention, and one thread is reproducible
    examples = load_examples(args.data)
    tiers = args.tiers.split(",") if args.tiers else list(DEFAULT_TIERS)
    unknown = sorted({ex.tier for ex in examples} - set(tiers))
    if unknown:
        raise DataError(f"labels {unknown} are not in tiers {tiers}; pass --tiers cheapest,...,largest")
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    train_val, holdout = split_by_group(examples, args.holdout, rng)
    train, val = split_by_group(train_val, args.val, rng)
    if not train or not val or not holdout:
        raise DataError(
            f"too few groups to split: {len(train)} train, {len(val)} val, {len(holdout)} held out"
        )

    featurizer = Featurizer(
        FeatureConfig(
            lead_words=args.lead_words,
            request_cues=not args.no_cues,
            max_chars=args.max_chars,
            tail_chars=args.max_chars // 3,
        )
    )
    tier_index = {t: i for i, t in enumerate(tiers)}

    def encode(rows: list[Example]) -> tuple[list[SparseFeatures], npt.NDArray[np.int64]]:
        return [featurizer(r.prompt) for r in rows], np.array([tier_index[r.tier] for r in rows])

    (x_train, y_train), (x_val, y_val) = encode(train), encode(val)
    w_train = np.array([r.weight for r in train], dtype=np.float32)
    w_val = torch.from_numpy(np.array([r.weight for r in val], dtype=np.float32))
    dense_train = np.stack([f.dense for f in x_train])
    mean, std = dense_train.mean(axis=0), dense_train.std(axis=0) + 1e-6
    # A feature constant in training (a cue no training prompt shows) must not be scaled by 1e6 later.
    std = np.where(std < 1e-3, 1.0, std).astype(np.float32)
    num_buckets, num_dense, hidden = featurizer.config.num_buckets, featurizer.num_dense, args.hidden

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.EmbeddingBag(num_buckets, hidden, mode="sum")
            torch.nn.init.normal_(self.embed.weight, std=0.05)
            self.dense = torch.nn.Linear(num_dense, hidden)
            self.drop = torch.nn.Dropout(args.dropout)
            self.out = torch.nn.Linear(hidden, len(tiers))

        def forward(
            self, idx: torch.Tensor, offsets: torch.Tensor, vals: torch.Tensor, dense: torch.Tensor
        ) -> torch.Tensor:
            h = self.embed(idx, offsets, per_sample_weights=vals) + self.dense(dense)
            return self.out(self.drop(torch.relu(h)))

    def batch(feats: list[SparseFeatures]) -> tuple[torch.Tensor, ...]:
        lengths = [len(f.indices) for f in feats]
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        return (
            torch.from_numpy(np.concatenate([f.indices for f in feats]).astype(np.int64)),
            torch.from_numpy(offsets.astype(np.int64)),
            torch.from_numpy(np.concatenate([f.values for f in feats]).astype(np.float32)),
            torch.from_numpy(((np.stack([f.dense for f in feats]) - mean) / std).astype(np.float32)),
        )

    net = Net()
    optimizer = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    # Class-balanced on the rows' own weights: each tier weighs the same in all.
    counts = np.bincount(y_train, weights=w_train, minlength=len(tiers)).astype(np.float32)
    class_weight = torch.from_numpy(counts.sum() / np.maximum(counts, 1e-6) / len(tiers))

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        per_row = torch.nn.functional.cross_entropy(logits, labels, reduction="none")
        w = weights * class_weight[labels]
        return (per_row * w).sum() / w.sum().clamp_min(1e-12)  # a batch of weight-0 rows: no step

    val_batch, val_labels = batch(x_val), torch.from_numpy(y_val)
    best_loss, best_state, best_epoch = float("inf"), None, 0
    order = list(range(len(x_train)))
    for epoch in range(args.epochs):
        net.train()
        rng.shuffle(order)
        for start in range(0, len(order), args.batch_size):
            chosen = order[start : start + args.batch_size]
            logits = net(*batch([x_train[i] for i in chosen]))
            loss = loss_fn(logits, torch.from_numpy(y_train[chosen]), torch.from_numpy(w_train[chosen]))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        net.eval()
        with torch.no_grad():
            val_loss = float(loss_fn(net(*val_batch), val_labels, w_val))
        if val_loss < best_loss:
            best_loss, best_epoch = val_loss, epoch + 1
            best_state = {k: v.clone() for k, v in net.state_dict().items()}
    assert best_state is not None
    net.load_state_dict(best_state)

    # Temperature scaling: the T minimising validation NLL (a 1-D search is enough).
    with torch.no_grad():
        val_logits = net(*val_batch).numpy().astype(np.float64)
    temperatures = np.exp(np.linspace(np.log(0.05), np.log(20.0), 400))
    nll = [_nll(val_logits / t, y_val) for t in temperatures]
    temperature = float(temperatures[int(np.argmin(nll))])

    state = {k: v.detach().numpy() for k, v in net.state_dict().items()}
    payload = ModelPayload(
        tiers=tiers,
        features=featurizer.config,
        temperature=temperature,
        dense_names=list(featurizer.dense_names),
        arrays={
            "embed": Array.of(state["embed.weight"], "<f2"),  # float16 halves the file; checked below
            "dense_w": Array.of(state["dense.weight"].T),
            "b1": Array.of(state["dense.bias"]),
            "w2": Array.of(state["out.weight"].T),
            "b2": Array.of(state["out.bias"]),
            "dense_mean": Array.of(mean),
            "dense_std": Array.of(std),
        },
    )
    # Held-out figures through the serving path (numpy, float16 weights).
    model = LearnedModel(payload)
    y_hold = np.array([tier_index[r.tier] for r in holdout])
    probs = np.stack([model.predict(r.prompt) for r in holdout])
    uncalibrated = LearnedModel(msgspec.structs.replace(payload, temperature=1.0))
    probs_raw = np.stack([uncalibrated.predict(r.prompt) for r in holdout])
    accuracy = float((probs.argmax(axis=1) == y_hold).mean())
    ece, ece_raw = expected_calibration_error(probs, y_hold), expected_calibration_error(probs_raw, y_hold)
    metrics = {
        "holdout_accuracy": round(accuracy, 4),
        "holdout_ece": round(ece, 4),
        "holdout_ece_uncalibrated": round(ece_raw, 4),
        "temperature": round(temperature, 4),
        "num_train": len(train),
        "num_val": len(val),
        "num_holdout": len(holdout),
        "best_epoch": best_epoch,
    }
    info = {
        "data": args.data.name,
        "data_sha256": hashlib.sha256(args.data.read_bytes()).hexdigest(),
        "args": json.dumps({k: str(v) for k, v in vars(args).items()}, sort_keys=True),
    }
    payload = msgspec.structs.replace(payload, metrics={k: float(v) for k, v in metrics.items()}, info=info)
    write_model(args.output, payload)

    print(f"examples: {len(train)} train / {len(val)} val / {len(holdout)} held out (split by group)")
    print(f"best epoch {best_epoch}/{args.epochs}, val loss {best_loss:.4f}, temperature {temperature:.3f}")
    print(f"held-out accuracy: {accuracy:.3f}")
    print(f"held-out ECE: {ece:.3f} calibrated (uncalibrated {ece_raw:.3f})")
    print("confusion (rows = true, cols = predicted): " + " ".join(tiers))
    predicted = probs.argmax(axis=1)
    for i, tier in enumerate(tiers):
        row = [int(((y_hold == i) & (predicted == j)).sum()) for j in range(len(tiers))]
        print(f"  {tier:>8}: {row}")
    size_kib = args.output.stat().st_size / 1024
    print(f"wrote {args.output} ({size_kib:.0f} KiB) in {time.perf_counter() - started:.1f} s")
    return 0


def _nll(logits: npt.NDArray[np.float64], labels: npt.NDArray[np.int64]) -> float:
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float(-log_probs[np.arange(len(labels)), labels].mean())


if __name__ == "__main__":
    raise SystemExit(train_main(sys.argv[1:]))
