"""The multi-turn chat workload of ``bench/kv_routing.py``, and its client.

Each conversation opens with one of the shared system prompts and a document of its own, and every
turn resends the whole history with the model's earlier replies (fixed seed: every mode sends the same
user turns). :func:`converse` plays one conversation turn after turn and returns a :class:`Turn` per
request: its TTFT, which gateway and replica served it and why (``x-sortyard-route-reason``), and the
prompt tokens the engine found cached (the stream's last chunk's usage). ``bench/kv_routing.py
--log-dir`` keeps them, one JSON line per turn, to tell what a slow turn waited for; :func:`alone`
finds the turns that had their replica to themselves, whose TTFT is the bench's floor.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from dataclasses import dataclass

import httpx

WORDS = (
    "account billing invoice refund shipping parcel warehouse router firmware update battery charger "
    "screen cable adapter warranty policy customer order delivery tracking address payment card bank "
    "transfer schedule meeting report summary budget forecast quarter revenue margin supplier contract"
).split()

Conversation = list[str]
"""A conversation's user turns; the first carries its document."""


@dataclass(frozen=True)
class Turn:
    """One request of a conversation, as the client saw it."""

    conversation: int
    turn: int
    started_s: float
    """From the run's start."""
    ttft_s: float
    ended_s: float
    """When its stream ended, from the run's start."""
    prompt_tokens: int
    cached_tokens: int
    route: str
    """The gateway's route reason (``kv:12/40 blocks@r2`` where KV events decided)."""


def text(rng: random.Random, num_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(num_words))


def workload(args: argparse.Namespace) -> tuple[list[str], list[tuple[int, Conversation]]]:
    """The shared system prompts, and each conversation's system prompt index and user turns."""
    rng = random.Random(args.seed)
    systems = [
        f"You are support assistant {i} of shop {i}. Follow these rules. {text(rng, args.system_words)}"
        for i in range(args.systems)
    ]
    conversations = []
    for c in range(args.conversations):
        document = f"Customer file {c}: {text(rng, args.document_words)}"
        turns = [f"{document}\n\nQuestion 1: {text(rng, 12)}?"]
        turns += [f"Question {t}: {text(rng, 12)}?" for t in range(2, rng.randint(*args.turns) + 1)]
        conversations.append((c % args.systems, turns))
    return systems, conversations


def chat(
    http: httpx.Client, url: str, model: str, messages: list[dict[str, str]], max_tokens: int
) -> tuple[float, str, str, dict[str, int]]:
    """One streamed turn: its TTFT in seconds, the reply's text, the route reason, the prompt's tokens
    and those found cached (``{"prompt": n, "cached": m}``, zeros where the stream gives no usage)."""
    body = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    ttft: float | None = None
    parts: list[str] = []
    tokens = {"prompt": 0, "cached": 0}
    with http.stream("POST", url + "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {response.read()!r}")
        route = response.headers.get("x-sortyard-route-reason", "")
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            if ttft is None:
                ttft = time.perf_counter() - started
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices", []):
                parts.append((choice.get("delta") or {}).get("content") or "")
            usage = chunk.get("usage") or {}
            if usage:
                details = usage.get("prompt_tokens_details") or {}
                tokens = {
                    "prompt": usage.get("prompt_tokens", 0),
                    "cached": details.get("cached_tokens") or 0,
                }
    assert ttft is not None, "no chunk streamed"
    return ttft, "".join(parts), route, tokens


def converse(
    urls: list[str],
    model: str,
    system: str,
    turns: Conversation,
    max_tokens: int,
    number: int,
    start_after_s: float,
    run_started: float,
) -> list[Turn]:
    """One conversation, turn after turn, from ``start_after_s`` on; with several gateways its turns go
    to each in turn (a load balancer in front of a gateway fleet keeps no conversation on one)."""
    time.sleep(start_after_s)
    messages = [{"role": "system", "content": system}]
    played = []
    with httpx.Client(timeout=600) as http:
        for t, user in enumerate(turns):
            messages.append({"role": "user", "content": user})
            started_s = time.perf_counter() - run_started
            ttft, reply, route, tokens = chat(
                http, urls[(number + t) % len(urls)], model, messages, max_tokens
            )
            ended_s = time.perf_counter() - run_started
            played.append(
                Turn(number, t + 1, started_s, ttft, ended_s, tokens["prompt"], tokens["cached"], route)
            )
            messages.append({"role": "assistant", "content": reply})
    return played


def alone(turns: list[Turn]) -> dict[str, int]:
    """The later turns that had their replica to themselves until their first token: KV hits (their
    route names the replica) that overlapped no other request there, nor any request whose replica
    the route does not name. Their TTFT is the most a pick could give a turn, whatever it chooses."""
    replica = {
        id(turn): turn.route.rpartition("blocks@")[2] if "blocks@" in turn.route else None for turn in turns
    }
    solo = []
    for turn in turns:
        label = replica[id(turn)]
        if turn.turn == 1 or label is None:
            continue
        first_token_s = turn.started_s + turn.ttft_s
        if not any(
            other is not turn
            and replica[id(other)] in (label, None)
            and other.started_s < first_token_s
            and other.ended_s > turn.started_s
            for other in turns
        ):
            solo.append(turn.ttft_s)
    if not solo:
        return {}
    return {"alone_turns": len(solo), "alone_ttft_p50_ms": round(1000 * statistics.median(solo))}
