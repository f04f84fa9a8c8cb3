# syntax=docker/dockerfile:1
# Sortyard gateway: `sortyard serve` on a slim Python, no torch, run as a non-root user.
#
#   docker build -f deploy/docker/gateway.Dockerfile -t sortyard/gateway:0.1.0 .
#   docker run --init -p 8000:8000 -v "$PWD/my-policy:/etc/sortyard:ro" sortyard/gateway:0.1.0
#
# The policy is never baked in: mount a directory at /etc/sortyard holding policy.yaml (and, if you
# keep keys apart, local.yaml: the overlay merged on top). SORTYARD_* variables set the rest
# (docs/operations.md); SORTYARD_REDIS_URL points every replica at one Redis (docs/scaling.md).
# BASE_IMAGE: any Debian bookworm with python3.11, or plain Debian (python3 then comes from apt).
# Both stages use it, so the venv's interpreter path is the same in each. See docs/deployment.md.
ARG BASE_IMAGE=python:3.11.13-slim-bookworm

FROM ${BASE_IMAGE} AS builder
RUN if ! command -v python3 >/dev/null; then \
        apt-get update && apt-get install -y --no-install-recommends python3 python3-venv \
        && rm -rf /var/lib/apt/lists/*; \
    fi
RUN python3 -m venv /opt/sortyard
ENV PATH=/opt/sortyard/bin:$PATH PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY deploy/docker/constraints.txt /tmp/constraints.txt
# dependencies first, from pyproject.toml alone (a layer that survives source edits), then the project
COPY pyproject.toml README.md /src/
RUN pip install -c /tmp/constraints.txt /src && pip uninstall -y sortyard
COPY gateway /src/gateway
COPY backends /src/backends
COPY sortyard /src/sortyard
RUN pip install --no-deps /src && python3 -c "import gateway.cli, uvloop, httptools, hiredis"

FROM ${BASE_IMAGE}
RUN if ! command -v python3 >/dev/null; then \
        apt-get update && apt-get install -y --no-install-recommends python3 \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && useradd --system --uid 10001 --home-dir /home/sortyard --create-home sortyard \
    && mkdir -p /etc/sortyard
COPY --from=builder /opt/sortyard /opt/sortyard
ENV PATH=/opt/sortyard/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    SORTYARD_POLICY_PATH=/etc/sortyard/policy.yaml \
    SORTYARD_HOST=0.0.0.0 \
    SORTYARD_PORT=8000
USER 10001
WORKDIR /home/sortyard
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('SORTYARD_PORT', '8000'), timeout=2)"]
# flags after the image name are appended: --workers 2, --log-level warning, ...
ENTRYPOINT ["sortyard", "serve"]
