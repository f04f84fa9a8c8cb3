"""bench/kv_tokenize.py (quoted in docs/routing.md): the chat workload's prompts tokenized whole and
piece by piece give the same ids; a tiny run on a BPE tokenizer trained here."""

from __future__ import annotations

from pathlib import Path

from kv_tokenize import main

from tests.gateway.kv_routing.test_segments import byte_level


def test_pieces_and_whole_prompts_agree_on_the_workload(tmp_path: Path) -> None:
    argv = [
        "--tokenizer",
        str(byte_level(tmp_path)),
        "--conversations",
        "3",
        "--turns",
        "2",
        "4",
        "--rounds",
        "1",
    ]
    result = main(argv)
    assert result["requests_whose_ids_differ"] == 0
    assert result["requests"] >= 6 and result["pieces_ms_per_request"] > 0
