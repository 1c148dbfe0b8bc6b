#!/usr/bin/env bash
# Creates (or updates) vidtx's two Prefect work pools on the server at PREFECT_API_URL:
#   vidtx-process     flows run as subprocesses of a worker on a machine with vidtx installed; Prefect's
#                     default process template: runs inherit the worker's environment (RAY_ADDRESS,
#                     MLFLOW_TRACKING_URI), and `make ui` creates the same pool for local work.
#   vidtx-kubernetes  flows run as Kubernetes Jobs in the training image (kubernetes.json).
# prefect.yaml's deployments name these pools. Needs only Prefect (not prefect-kubernetes) here.
set -euo pipefail
PREFECT=${PREFECT:-prefect}
: "${PREFECT_API_URL:?set PREFECT_API_URL, e.g. http://127.0.0.1:4200/api}"

"$PREFECT" work-pool create vidtx-process --type process --overwrite
"$PREFECT" work-pool create vidtx-kubernetes --type kubernetes --base-job-template "$(dirname "$0")/kubernetes.json" --overwrite
