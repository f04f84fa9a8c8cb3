"""Tensor and pipeline parallelism over torch.distributed (gloo on CPU, NCCL on CUDA), one process per rank.

- ``group.py``: the layout of the ranks (which heads, layers and vocabulary rows each holds; whether a
  model can be split so) and the process group joining them, with a timeout on every collective.
- ``layers.py``: the Megatron-style column-, row- and vocabulary-parallel layers.
- ``pipeline.py``: the stand-ins for the layers other stages hold, which pass hidden states between
  stages.
- ``micro_batches.py``: a step split into micro-batches that the stages compute at once, and each
  rank's run of them.
- ``workers.py``: ranks 1..N-1 as processes, the step RPC from rank 0, and what happens when one dies.

What every rank builds, and the worker process itself, is ``backends/engine/rank.py`` (it needs the
models, which import this package). docs/engine.md, "Tensor and pipeline parallelism", has the picture.
"""
