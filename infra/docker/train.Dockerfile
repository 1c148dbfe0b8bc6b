# syntax=docker/dockerfile:1
# The vidtx training image: CUDA PyTorch, DeepSpeed, Ray and the vidtx checkout at /opt/vidtx with
# `vidtx` on PATH. Ray head and GPU workers (KubeRay and `ray up`) and Prefect flow-run pods run it.
# Build from the repository root:
#   docker build -f infra/docker/train.Dockerfile -t ghcr.io/vidtx/vidtx-train:0.1.0 .
#
# torch is the version pyproject.toml pins, taken from PyPI, where torch 2.13.0 for Linux x86_64 is
# the CUDA 13.0 build (it needs NVIDIA driver >= 580). Every other package is pinned by
# constraints.txt (the dev lock) without its CPU torch line, so the image runs the tested versions.
# For hosts with an older driver, build a CUDA 12 variant from PyTorch's index instead:
#   --build-arg CUDA_VERSION=12.8.1 --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128
# decord publishes x86_64 wheels only, so the image is linux/amd64.
ARG CUDA_VERSION=13.0.2
FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu22.04

# Python 3.11 (vidtx's only version) from deadsnakes; build-essential + the CUDA toolkit of the base
# image let DeepSpeed JIT-compile ops; git records the commit in MLflow; rsync and sudo are what
# `ray up` needs inside its containers; wget serves KubeRay's exec health probes.
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates gpg-agent software-properties-common \
    && add-apt-repository -y ppa:deadsnakes/ppa \
    && apt-get update \
    && apt-get install -y --no-install-recommends \
        python3.11 python3.11-dev python3.11-venv build-essential git rsync sudo wget \
    && rm -rf /var/lib/apt/lists/*

# A non-root user with passwordless sudo, as in Ray's own images (`ray up` chowns its file mounts).
RUN useradd --create-home --uid 1000 --shell /bin/bash vidtx \
    && echo "vidtx ALL=(ALL) NOPASSWD:ALL" > /etc/sudoers.d/vidtx

# KubeRay and `ray up` start Ray through login shells, which rebuild PATH: profile.d keeps the venv.
ENV VIRTUAL_ENV=/opt/venv
ENV PATH=/opt/venv/bin:$PATH
RUN python3.11 -m venv $VIRTUAL_ENV \
    && echo 'export PATH=/opt/venv/bin:$PATH' > /etc/profile.d/vidtx-venv.sh \
    && pip install --no-cache-dir pip==26.3

WORKDIR /opt/vidtx

# Dependencies first (a layer that survives source edits). boto3 is for the `ray up` autoscaler on AWS.
COPY pyproject.toml constraints.txt ./
ARG TORCH_INDEX_URL=https://pypi.org/simple
RUN grep -v '^torch==' constraints.txt > /tmp/constraints.txt \
    && python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install --no-cache-dir --index-url "$TORCH_INDEX_URL" --extra-index-url https://pypi.org/simple \
        "$(grep '^torch==' /tmp/requirements.txt)" \
    && pip install --no-cache-dir -c /tmp/constraints.txt -r /tmp/requirements.txt boto3==1.44.8

# DeepSpeed ops are JIT-compiled at first use (cached in $TORCH_EXTENSIONS_DIR). vidtx hands DeepSpeed
# torch optimizers, so a default run needs none; to build some now instead (no GPU needed):
#   --build-arg DEEPSPEED_AOT_OPS="FUSED_ADAM CPU_ADAM"
ARG DEEPSPEED_AOT_OPS=""
ARG TORCH_CUDA_ARCH_LIST="8.0;9.0;10.0"
RUN if [ -n "$DEEPSPEED_AOT_OPS" ]; then \
        for op in $DEEPSPEED_AOT_OPS; do export "DS_BUILD_${op}=1"; done \
        && pip install --no-cache-dir --no-build-isolation --no-deps --force-reinstall \
            "$(grep '^deepspeed==' /tmp/constraints.txt)"; \
    fi

# The checkout (flows/ and configs/ stay beside the package: the flows read configs/ from here).
COPY . .
RUN pip install --no-cache-dir --no-deps -e . \
    && git config --system --add safe.directory /opt/vidtx \
    && vidtx --help > /dev/null

ENV TORCH_EXTENSIONS_DIR=/home/vidtx/.cache/torch_extensions \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    MLFLOW_DISABLE_TELEMETRY=true \
    DO_NOT_TRACK=true \
    RAY_USAGE_STATS_ENABLED=0
USER vidtx
CMD ["vidtx", "--help"]
