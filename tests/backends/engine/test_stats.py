"""``EngineStats``: one type for the engine and the server, importable without torch."""

from __future__ import annotations

import subprocess
import sys

from backends.engine.sampling_params import SamplingParams
from backends.engine.stats import EngineStats
from tests.backends.engine.conftest import EngineFactory


def test_the_server_and_the_stats_import_without_torch() -> None:
    code = "import sys, backends.engine.stats, backends.serving.app; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_the_engine_counts_into_one_snapshot(make_engine: EngineFactory) -> None:
    engine = make_engine()
    before = engine.stats()
    assert isinstance(before, EngineStats)
    assert before.num_blocks_free == before.num_blocks_total > 0
    engine.generate([[10, 20, 30]], SamplingParams(max_tokens=4, ignore_eos=True))
    after = engine.stats()
    assert (after.num_prompt_tokens, after.num_generated_tokens) == (3, 4)
    assert after.num_generated_tokens == engine.num_generated_tokens
    assert after.num_running == after.num_waiting == 0
