# syntax=docker/dockerfile:1
# The offline half: market logs, oracle, simulator, training, export (`rcb` with the [train] extra).
# Build from the repository root:
#   docker build -f docker/train.Dockerfile -t rcb-train .
#   docker run --rm -v "$PWD/runs:/app/runs" -v "$PWD/data:/app/data" rcb-train train --help
ARG PYTHON_IMAGE=python:3.11-slim
FROM ${PYTHON_IMAGE}

# torch is installed first, pinned, from PyTorch's CPU-only index: on Linux x86_64 the PyPI wheel of
# torch is the CUDA build and drags in several GB of nvidia-* wheels. The later `pip install
# .[train]` sees torch==2.13.0 (2.13.0+cpu) as already satisfied and keeps it. Needs internet access
# to that index at build time; override TORCH_INDEX_URL to use a mirror.
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv \
    && pip install --no-cache-dir --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"

WORKDIR /app
COPY pyproject.toml README.md ./
COPY rcb ./rcb
COPY model ./model
COPY training ./training
COPY service ./service
# DL3013 (pin versions) does not apply: this installs the project itself; torch is pinned above.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir ".[train]" \
    && python -c "import torch, sys; sys.exit(torch.version.cuda is not None)"

COPY models ./models
# Numeric ids, so `USER` is resolvable by any host/orchestrator (runAsNonRoot checks need a number).
RUN groupadd --system --gid 10001 rcb \
    && useradd --system --no-log-init -l --uid 10001 --gid rcb --home-dir /app --shell /usr/sbin/nologin rcb \
    && mkdir -p /app/data /app/runs /app/out \
    && chown 10001:10001 /app/data /app/runs /app/out
# /app (the home directory) is not writable: matplotlib's cache goes to /tmp, for any --user.
ENV MPLCONFIGDIR=/tmp/matplotlib
USER 10001:10001
VOLUME ["/app/data", "/app/runs", "/app/out"]
ENTRYPOINT ["rcb"]
CMD ["--help"]
