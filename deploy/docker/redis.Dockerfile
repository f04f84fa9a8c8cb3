# syntax=docker/dockerfile:1
# Redis for deploy/compose.yaml, from Debian's redis-server (7.0), so the compose core builds from the
# same base image as the gateway and the engine (a registry-less machine has no redis:7 image).
# Where Docker Hub is reachable, the official image works the same: point REDIS_IMAGE at it and
# drop the build. No persistence: Sortyard keeps only counters and caches there.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN apt-get update && apt-get install -y --no-install-recommends redis-server \
    && rm -rf /var/lib/apt/lists/*
USER redis
EXPOSE 6379
HEALTHCHECK --interval=5s --timeout=2s --retries=5 CMD ["redis-cli", "ping"]
ENTRYPOINT ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--save", "", "--appendonly", "no"]
