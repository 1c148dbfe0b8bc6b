# syntax=docker/dockerfile:1
# The Prefect kubernetes worker (infra/prefect/worker.yaml): it polls the vidtx-kubernetes work pool
# and creates one Kubernetes Job per flow run; the flows themselves run in the training image, so this
# image has Prefect and its Kubernetes integration only. Build from the repository root:
#   docker build -f infra/docker/prefect-worker.Dockerfile -t ghcr.io/vidtx/vidtx-prefect-worker:0.1.0 .
FROM python:3.11-slim-bookworm

# prefect (and what it shares with vidtx) at the versions of constraints.txt.
COPY constraints.txt /tmp/constraints.txt
RUN grep -v '^torch==' /tmp/constraints.txt > /tmp/worker-constraints.txt \
    && pip install --no-cache-dir -c /tmp/worker-constraints.txt prefect prefect-kubernetes==0.8.0 \
    && rm /tmp/*constraints.txt \
    && useradd --create-home --uid 1000 prefect

ENV PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=true
USER prefect
CMD ["prefect", "worker", "start", "--pool", "vidtx-kubernetes", "--type", "kubernetes", "--with-healthcheck"]
