# syntax=docker/dockerfile:1
# Sortyard load tests: Locust with loadtests/ at /app, for the compose file's and the Kubernetes
# manifests' master and workers (docs/loadtests.md, docs/deployment.md).
#
#   docker build -f deploy/docker/loadtest.Dockerfile -t sortyard/loadtest:0.1.0 .
#   docker run --init sortyard/loadtest:0.1.0 -f loadtests/locustfile.py --headless --host http://gw:8000 ...
#
# loadtests/ needs Locust and the standard library only (no gateway, no torch).
ARG BASE_IMAGE=python:3.11.13-slim-bookworm

FROM ${BASE_IMAGE}
ARG LOCUST_VERSION=2.47.0
RUN if ! command -v python3 >/dev/null; then \
        apt-get update && apt-get install -y --no-install-recommends python3 python3-venv \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && python3 -m venv /opt/locust \
    && /opt/locust/bin/pip install --no-cache-dir --disable-pip-version-check "locust==${LOCUST_VERSION}" \
    && useradd --system --uid 10001 --home-dir /home/locust --create-home locust
COPY loadtests /app/loadtests
ENV PATH=/opt/locust/bin:$PATH PYTHONUNBUFFERED=1
USER 10001
WORKDIR /app
EXPOSE 8089 5557
ENTRYPOINT ["locust"]
