"""``sortyard route explain "prompt" [--policy FILE [--overlay FILE]]``: which pool a prompt goes to,
and why.

``--policy`` is loaded as ``sortyard serve`` loads it (its overlay merged, every check run), so a
policy the gateway would refuse is refused here too (exit 2, the load error), and a rule's pool is one
the policy has. Without it, the shipped learned model decides."""

from __future__ import annotations

import argparse
import sys
import time

from gateway.cli.policy import load_served
from gateway.policy import PolicyError
from gateway.tiers.classifier import ClassifierLoadError, ClassifyInput
from gateway.tiers.config import ClassifierConfig, LearnedConfig
from gateway.tiers.factory import build_classifier

__all__ = ["explain_main", "policy_classifier"]


def policy_classifier(path: str, overlay: str | None = None) -> tuple[ClassifierConfig, list[str]]:
    """The classifier section of the policy ``sortyard serve --policy PATH`` would serve, and its pool
    names; PolicyError when the gateway would refuse the policy or it has no classifier."""
    policy, _ = load_served(path, overlay)
    if policy.classifier is None:
        raise PolicyError(f"{path}: no classifier: section (model {policy.auto_model!r} is not served)")
    return policy.classifier, list(policy.pools)


def explain_main(argv: list[str]) -> int:
    """Entry point of ``sortyard route explain``; returns the exit status."""
    p = argparse.ArgumentParser(prog="sortyard route explain", description=__doc__)
    p.add_argument("prompt", help="the user message to classify ('-' reads stdin)")
    p.add_argument(
        "--policy", help="a policy YAML, loaded as `sortyard serve` loads it (default: the shipped model)"
    )
    p.add_argument("--overlay", help="the overlay merged on top (default: as serve, local.yaml beside it)")
    p.add_argument("--system", default=None, help="a system prompt to put before the message")
    p.add_argument("--tools", action="store_true", help="pretend the request declares tools")
    p.add_argument("--json-mode", action="store_true", help="pretend response_format asks for JSON")
    args = p.parse_args(argv)
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    if args.overlay is not None and args.policy is None:
        p.error("--overlay goes with --policy")
    config: ClassifierConfig = LearnedConfig()
    pools: list[str] | None = None
    try:
        if args.policy is not None:
            config, pools = policy_classifier(args.policy, args.overlay)
        classifier = build_classifier(config, pools=pools)
    except (PolicyError, ClassifierLoadError) as exc:
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
