# syntax=docker/dockerfile:1
# The MLflow tracking server: MLflow at the version of constraints.txt plus the drivers of its stores
# (psycopg2 for the Postgres backend, boto3 for the S3 artifact store) and its basic-auth app. compose.yaml and
# infra/k8s/services.yaml configure it through MLFLOW_* environment variables. Build from the root:
#   docker build -f infra/docker/mlflow.Dockerfile -t ghcr.io/vidtx/vidtx-mlflow:0.1.0 .
FROM python:3.11-slim-bookworm

COPY constraints.txt /tmp/constraints.txt
RUN grep -v '^torch==' /tmp/constraints.txt > /tmp/mlflow-constraints.txt \
    && pip install --no-cache-dir -c /tmp/mlflow-constraints.txt "mlflow[auth]" psycopg2-binary==2.9.13 boto3==1.44.8 \
    && rm /tmp/*constraints.txt \
    && useradd --create-home --uid 1000 mlflow

ENV MLFLOW_DISABLE_TELEMETRY=true DO_NOT_TRACK=true
USER mlflow
# the basic-auth app keeps its users in ./basic_auth.db (MLflow's default auth config): the home
WORKDIR /home/mlflow
EXPOSE 5000
CMD ["mlflow", "server", "--app-name", "basic-auth", "--host", "0.0.0.0", "--port", "5000", "--workers", "2"]
