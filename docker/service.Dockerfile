# syntax=docker/dockerfile:1
# The online half: the FastAPI bidding service (`python -m service`). The image holds the base
# dependencies of pyproject.toml and a wheel of model/ and service/ only: no training/, no rcb/, no
# torch, pandas or pyarrow. Build from the repository root:
#   docker build -f docker/service.Dockerfile -t rcb-service .
ARG PYTHON_IMAGE=python:3.11-slim

# ---- builder: a venv with the base dependencies and the rcb-service wheel -----------------------
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

# Dependencies first, in their own layer: [project].dependencies read straight from pyproject.toml
# (never the optional extras), so a source-only change does not reinstall them. All of them ship
# manylinux wheels for CPython 3.11, so no compiler is needed. service_dist.py also writes the
# pyproject.toml of the service wheel (distribution rcb-service: model/ and service/ only).
COPY pyproject.toml docker/service_dist.py ./
RUN python service_dist.py requirements pyproject.toml > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt \
    && mkdir /src/wheel \
    && python service_dist.py pyproject pyproject.toml > /src/wheel/pyproject.toml

# Then model/ and service/, as a wheel, installed without dependencies (they are all there already).
COPY model ./wheel/model
COPY service ./wheel/service
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels ./wheel \
    && pip install --no-cache-dir --no-deps /wheels/rcb_service-*.whl

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

# The service needs neither the training stack nor the offline data tools: fail the build if any of
# them slipped in, and check that the entry point starts without them.
RUN python -c "import importlib.util as u, sys; found = [m for m in ('torch', 'pandas', 'pyarrow', 'training', 'rcb') if u.find_spec(m)]; sys.exit(f'importable in the service image: {found}' if found else 0)" \
    && python -m service --help > /dev/null

USER 10001:10001
EXPOSE 8000
# Liveness only (/healthz); readiness (/readyz: store reachable, model loaded) is for orchestrators.
# slim has no curl: use the interpreter that is already there.
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]
CMD ["python", "-m", "service", "--host", "0.0.0.0", "--port", "8000"]
