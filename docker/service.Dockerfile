# syntax=docker/dockerfile:1
# The online half: the FastAPI bidding service (`rcb serve`). Base install only: no [train]
# extra, no torch. Build from the repository root:
#   docker build -f docker/service.Dockerfile -t rcb-service .
ARG PYTHON_IMAGE=python:3.11-slim

# ---- builder: a venv with the base dependencies and the rcb wheel -------------------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

# Dependencies first, in their own layer: [project].dependencies read straight from pyproject.toml
# (never the optional extras), so a source-only change does not reinstall them. All of them ship
# manylinux wheels for CPython 3.11, so no compiler is needed.
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt

# Then the project itself, as a wheel, installed without dependencies (they are all there already).
COPY rcb ./rcb
COPY model ./model
COPY training ./training
COPY service ./service
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
    && pip install --no-cache-dir --no-deps /wheels/rcb-*.whl

# ---- runtime: slim image, non-root, venv + shipped model ----------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    RCB_MODEL_DIR=/app/models/default
# Numeric ids, so `USER` is resolvable by any host/orchestrator (runAsNonRoot checks need a number).
RUN groupadd --system --gid 10001 rcb \
    && useradd --system --no-log-init -l --uid 10001 --gid rcb --home-dir /app --shell /usr/sbin/nologin rcb
WORKDIR /app
COPY --from=builder /opt/venv /opt/venv
COPY models/default /app/models/default

# The service must not need torch: fail the build if it (or the training stack) slipped in, and
# check that the console script starts without it.
RUN python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)" \
    && rcb --help > /dev/null

USER 10001:10001
EXPOSE 8000
# Liveness only (/healthz); readiness (/readyz: store reachable, model loaded) is for orchestrators.
# slim has no curl: use the interpreter that is already there.
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]
CMD ["rcb", "serve", "--host", "0.0.0.0", "--port", "8000"]
