#!/usr/bin/env bash
# Local UIs for vidtx: a Prefect server and the MLflow UI on 127.0.0.1, the deployments of
# prefect.yaml for the local process pool, and a process worker. `ui.sh start` / `ui.sh stop`.
# Everything it starts is recorded in .ui/*.pid and stopped by `ui.sh stop` (make ui-stop).
set -euo pipefail
cd "$(dirname "$0")/../.."

BIN=${BIN:-.venv/bin}
STATE=${UI_STATE:-.ui}  # pid files and logs
PREFECT_PORT=${PREFECT_PORT:-4200}
MLFLOW_PORT=${MLFLOW_PORT:-5000}
MLFLOW_DB=$(realpath -m "${MLFLOW_DB:-runs/demo/mlflow.db}")
export PREFECT_HOME=${PREFECT_HOME:-$PWD/.prefect}
export PREFECT_API_URL="http://127.0.0.1:${PREFECT_PORT}/api"
# Prefect's new UI, under /v2, is the one its root opens: the links Prefect writes (the deploy log) and
# vidtx writes (flows/lineage.py) go there, not to the old UI's routes without /v2.
export PREFECT_UI_URL="http://127.0.0.1:${PREFECT_PORT}/v2"
eval "$("$BIN/python" -m vidtx.env)"  # the environment defaults every vidtx entry point applies
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false  # no huey job workers on a small machine
# Concurrency-slot leases on disk (under PREFECT_HOME), not in the server's memory: a server restart
# would otherwise forget the lease of a run whose process died while the slot stays taken, and
# `train-model` (concurrency_limit 1) would wait in AwaitingConcurrencySlot for ever. On disk, the
# lease of a dead run expires and the server's repossessor frees the slot.
export PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE=prefect.server.concurrency.lease_storage.filesystem

wait_for() {  # URL NAME: poll until it answers, up to 120 s
  for _ in $(seq 120); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 1; done
  echo "error: $2 did not come up at $1 (see $STATE/$2.log)" >&2; return 1
}

start_background() {  # NAME COMMAND...: start, record the PID
  local name=$1; shift
  nohup "$@" >"$STATE/$name.log" 2>&1 &
  echo $! >"$STATE/$name.pid"
}

start() {
  mkdir -p "$STATE" "$(dirname "$MLFLOW_DB")" "$PREFECT_HOME"
  if [ -e "$STATE/prefect-server.pid" ]; then echo "already started (make ui-stop first)" >&2; exit 1; fi
  # every process of this start carries its token: `ui.sh stop` checks that none is left (infra/local/leftovers.py)
  "$BIN/python" -m infra.local.leftovers new-token "make ui" >"$STATE/owner"
  export VIDTX_OWNERS="${VIDTX_OWNERS:+$VIDTX_OWNERS:}$(cat "$STATE/owner")"
  # Prefect's server, its SQLite transactions taking the write lock when they begin (infra/local/prefect_server.py)
  start_background prefect-server "$BIN/python" -m infra.local.prefect_server --host 127.0.0.1 --port "$PREFECT_PORT"
  # --app-name vidtx: MLflow's server opening in its model-training view (vidtx/tracking/ui_server.py)
  start_background mlflow-ui "$BIN/mlflow" ui --app-name vidtx --host 127.0.0.1 --port "$MLFLOW_PORT" \
    --backend-store-uri "sqlite:///$MLFLOW_DB" --workers 1
  wait_for "http://127.0.0.1:${PREFECT_PORT}/api/health" prefect-server
  wait_for "http://127.0.0.1:${MLFLOW_PORT}/health" mlflow-ui
  "$BIN/prefect" work-pool inspect vidtx-process >/dev/null 2>&1 \
    || "$BIN/prefect" work-pool create vidtx-process --type process >/dev/null
  "$BIN/prefect" --no-prompt deploy --prefect-file prefect.yaml \
    --name shard-dataset/local --name train-model/local --name evaluate-model/local \
    --name register-model/local --name sweep-model/local --name pretrain-model/local \
    --name batch-predict/local \
    --name video-pipeline/demo >"$STATE/deploy.log" 2>&1 \
    || { echo "error: prefect deploy failed (see $STATE/deploy.log)" >&2; exit 1; }
  # runs left in flight by a previous worker (killed, or the machine went down) have no process
  "$BIN/python" infra/local/flow_runs.py crash-orphans
  start_background prefect-worker "$BIN/prefect" worker start --pool vidtx-process
  cat <<MSG
Prefect UI: ${PREFECT_UI_URL}   (deployments: video-pipeline/demo, train-model/local, ...)
MLflow UI:  http://127.0.0.1:${MLFLOW_PORT}/#/experiments?workflowType=machine_learning   (tracking store: $MLFLOW_DB)
Run a flow: open Deployments -> video-pipeline/demo -> Run, or
            PREFECT_API_URL=$PREFECT_API_URL $BIN/prefect deployment run video-pipeline/demo
Stop:       make ui-stop
MSG
}

descendants() {  # PID...: every process below them, deepest last
  local pid child
  for pid in "$@"; do
    for child in $(ps -o pid= --ppid "$pid" 2>/dev/null); do echo "$child"; descendants "$child"; done
  done
}

stop_process() {  # PID: SIGTERM, then SIGINT (the Prefect worker wants a second signal), then SIGKILL
  local pid=$1
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 8); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
  kill -INT "$pid" 2>/dev/null || true
  for _ in $(seq 10); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
  kill -KILL "$pid" 2>/dev/null || true
}

stop() {
  local pidfile pid started=() tree=() left=() status=0
  for pidfile in "$STATE"/*.pid; do [ -e "$pidfile" ] && started+=("$(cat "$pidfile")"); done
  [ ${#started[@]} -gt 0 ] || { echo "nothing to stop"; return 0; }
  # Everything below what `make ui` started (flow runs, their local Ray, its workers), taken now:
  # a process whose parent is stopped first is re-parented and can no longer be found from here.
  mapfile -t tree < <(descendants "${started[@]}")
  if kill -0 "$(cat "$STATE/prefect-worker.pid" 2>/dev/null)" 2>/dev/null \
    && curl -fsS -o /dev/null "$PREFECT_API_URL/health" 2>/dev/null; then
    # Through the API, so that the runs end Cancelled and their training unwinds (Ray stopped,
    # MLflow run KILLED); the worker stops the flow-run processes.
    "$BIN/python" infra/local/flow_runs.py cancel --timeout 90 || true
  fi
  for pidfile in "$STATE"/prefect-worker.pid "$STATE"/*.pid; do
    [ -e "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    stop_process "$pid"
    rm -f "$pidfile"
    echo "stopped $(basename "$pidfile" .pid) ($pid)"
  done
  for pid in "${tree[@]}"; do kill -0 "$pid" 2>/dev/null && left+=("$pid"); done
  if [ ${#left[@]} -gt 0 ]; then  # e.g. Ray's agents, which ignore SIGTERM
    kill -TERM "${left[@]}" 2>/dev/null || true
    sleep 5
    kill -KILL "${left[@]}" 2>/dev/null || true
    echo "stopped ${#left[@]} processes left below them"
  fi
  if [ -e "$STATE/owner" ]; then  # anything else of this start, wherever it was reparented
    "$BIN/python" -m infra.local.leftovers check "$(cat "$STATE/owner")" "make ui-stop" || status=1
    rm -f "$STATE/owner"
  fi
  return "${status:-0}"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
