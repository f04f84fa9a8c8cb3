"""Replica choice with prompt-prefix affinity and per-tenant cache salts."""

from __future__ import annotations

from pathlib import Path

import httpx

from gateway.keys.hashing import hash_key, new_key
from tools.servers.fake_upstream import FakeUpstream
from tools.servers.gateway_server import GatewayServer, fake_policy, write_policy

KEY_A, KEY_B = new_key(), new_key()


def test_shared_prefixes_stick_to_one_replica_and_salts_are_per_tenant(tmp_path: Path) -> None:
    replicas = [FakeUpstream().start() for _ in range(2)]
    document = fake_policy(replicas[0].base_url)
    document["pools"]["duo"] = {
        "replicas": [{"base_url": r.base_url, "model": "echo", "send_cache_salt": True} for r in replicas]
    }
    document["auth"] = {"required": True}
    document["keys"] = [
        {"sha256": hash_key(KEY_A), "tenant": "a"},
        {"sha256": hash_key(KEY_B), "tenant": "b"},
    ]
    gateway = GatewayServer(write_policy(tmp_path / "p.yaml", document)).start()
    try:
        for prompt in ("You are a pirate. " * 200, "You are a poet. " * 200):
            counts_before = [len(r.requests) for r in replicas]
            for turn in range(8):
                response = httpx.post(
                    gateway.url + "/v1/chat/completions",
                    headers={"Authorization": f"Bearer {KEY_A}"},
                    json={
                        "model": "duo",
                        "messages": [
                            {"role": "system", "content": prompt},
                            {"role": "user", "content": f"question {turn}"},
                        ],
                    },
                )
                assert response.status_code == 200
            served = [len(r.requests) - b for r, b in zip(replicas, counts_before, strict=True)]
            assert sorted(served) == [0, 8], served  # every turn went to the replica holding the prefix
        salts = {}
        for key in (KEY_A, KEY_B):
            for r in replicas:
                r.requests.clear()
            httpx.post(
                gateway.url + "/v1/chat/completions",
                headers={"Authorization": f"Bearer {key}"},
                json={"model": "duo", "messages": [{"role": "user", "content": "hi"}]},
            )
            (sent,) = [request for r in replicas for request in r.requests]
            salts[key] = sent["cache_salt"]
        assert salts[KEY_A] != salts[KEY_B]
        plain = httpx.post(
            gateway.url + "/v1/chat/completions",
            headers={"Authorization": f"Bearer {KEY_A}"},
            json={"model": "small", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert plain.status_code == 200 and "cache_salt" not in replicas[0].requests[-1]
        metrics = httpx.get(gateway.url + "/metrics").text
        assert 'sortyard_cache_events_total{cache="affinity",event="affinity_hit"}' in metrics
    finally:
        gateway.stop()
        for r in replicas:
            r.stop()
