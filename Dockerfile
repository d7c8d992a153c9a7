# syntax=docker/dockerfile:1
#
# saber-gateway on python:3.11-slim. The same image runs saber-sim, the vLLM
# stand-in (same package): `docker run --entrypoint saber-sim IMAGE --host 0.0.0.0`.
#
#   docker build -t saber-gateway .
#   docker run -p 8080:8080 -e SABER_BACKEND_URL=http://vllm:8000 \
#     -v "$PWD/configs/gateway.yaml:/etc/saber/gateway.yaml:ro" \
#     -v "$PWD/profiles:/etc/saber/profiles:ro" \
#     -e SABER_PROFILE=/etc/saber/profiles/my-vllm.json saber-gateway
#
# Settings: the YAML at $SABER_CONFIG, overridden by SABER_* variables
# (docs/gateway.md lists them all). See docs/deploy.md for the full stack.

ARG PYTHON_IMAGE=python:3.11-slim

# ---- builder: the project's wheel and every dependency's, nothing else ----
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
COPY configs ./configs
COPY profiles ./profiles
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

# ---- runtime: installs the wheels offline, runs as a non-root user ----
FROM ${PYTHON_IMAGE} AS runtime
ARG SABER_UID=10001
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SABER_CONFIG=/etc/saber/gateway.yaml \
    SABER_HOST=0.0.0.0 \
    SABER_PORT=8080

# The wheels are bind-mounted from the builder, so they never land in a layer.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels /wheels/saber-*.whl \
 && groupadd --system --gid "${SABER_UID}" saber \
 && useradd --system --uid "${SABER_UID}" --gid saber --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin saber

# Defaults that work without mounts; the compose stack mounts over both
# (/etc/saber/gateway.yaml and /etc/saber/profiles, read-only).
COPY configs/gateway.yaml /etc/saber/gateway.yaml
COPY profiles/ /etc/saber/profiles/

USER ${SABER_UID}:${SABER_UID}
# A working directory the non-root user may write to (saber-profile's default --out).
WORKDIR /tmp
EXPOSE 8080

# /health/ready answers 200 only while the gateway takes requests: the backend
# answers its own /health and the gateway is not draining; it needs no API key. So
# the container reads "unhealthy" while vLLM is down or still loading the model.
# SABER_HEALTHCHECK_URL overrides the URL (e.g. when saber-sim runs from this image).
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ.get('SABER_HEALTHCHECK_URL') or 'http://127.0.0.1:%s/health/ready' % os.environ.get('SABER_PORT', '8080'), timeout=4)"]

# Shutdown: SIGTERM drains the gateway (new and queued requests get 503, running
# ones may finish for SABER_DRAIN_TIMEOUT_S, the rest get an error event), then it
# exits. Give it a grace period of at least the drain timeout plus 5 s before
# SIGKILL: 40 s here (docker stop -t 40; compose's stop_grace_period: 40s;
# docs/deploy.md, "Stopping").
ENV SABER_DRAIN_TIMEOUT_S=30
STOPSIGNAL SIGTERM

ENTRYPOINT ["saber-gateway"]
