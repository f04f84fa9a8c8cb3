"""``sortyard route explain "prompt" [--policy FILE]``: which pool a prompt goes to, and why."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import yaml

from gateway.tiers.classifier import ClassifierLoadError, ClassifyInput
from gateway.tiers.config import ClassifierConfig, LearnedConfig
from gateway.tiers.factory import build_classifier

__all__ = ["explain_main", "load_classifier_config"]


def load_classifier_config(path: Path) -> ClassifierConfig:
    """The classifier section of a policy file: the top level itself (it has ``kind``), or under
    ``classifier:`` / ``routing: {classifier: ...}``."""
    try:
        data: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ClassifierLoadError(f"cannot read policy {str(path)!r}: {exc}") from exc
    section = data
    if isinstance(data, dict) and "kind" not in data:
        section = data.get("classifier") or (data.get("routing") or {}).get("classifier")
    if not isinstance(section, dict):
        raise ClassifierLoadError(f"policy {str(path)!r} has no classifier section (a mapping with `kind`)")
    try:
        return msgspec.convert(section, ClassifierConfig)
    except msgspec.ValidationError as exc:
        raise ClassifierLoadError(f"policy {str(path)!r}: invalid classifier config: {exc}") from exc


def explain_main(argv: list[str]) -> int:
    """Entry point of ``sortyard route explain``; returns the exit status."""
    p = argparse.ArgumentParser(prog="sortyard route explain", description=__doc__)
    p.add_argument("prompt", help="the user message to classify ('-' reads stdin)")
    p.add_argument("--policy", type=Path, help="policy YAML (default: the shipped learned model)")
    p.add_argument("--system", default=None, help="a system prompt to put before the message")
    p.add_argument("--tools", action="store_true", help="pretend the request declares tools")
    p.add_argument("--json-mode", action="store_true", help="pretend response_format asks for JSON")
    args = p.parse_args(argv)
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    try:
        config = load_classifier_config(args.policy) if args.policy else LearnedConfig()
        classifier = build_classifier(config, pools=None)
    except ClassifierLoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    messages = [{"role": "system", "content": args.system}] if args.system else []
    messages.append({"role": "user", "content": prompt})
    request = ClassifyInput(messages=messages, tools=args.tools, json_mode=args.json_mode)
    started = time.perf_counter()
    decision = classifier.classify(request)
    elapsed_ms = (time.perf_counter() - started) * 1000
    print(f"pool: {decision.pool}")
    print(f"reason: {decision.reason}")
    if decision.probabilities:
        print("probabilities: " + " ".join(f"{k}={v:.3f}" for k, v in decision.probabilities.items()))
    print(f"classifier: {config.__struct_config__.tag}" + _describe(config))
    print(f"latency: {elapsed_ms:.2f} ms (first call, includes warm-up)")
    return 0


def _describe(config: ClassifierConfig) -> str:
    if isinstance(config, LearnedConfig):
        where = config.path or "shipped default"
        return f" (model {where}, cost_quality {config.cost_quality})"
    return ""
