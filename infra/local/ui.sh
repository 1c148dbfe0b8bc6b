#!/usr/bin/env bash
# Local UIs for vidtx: a Prefect server and the MLflow UI on 127.0.0.1, the deployments of
# prefect.yaml for the local process pool, and a process worker. `ui.sh start` / `ui.sh stop`.
# Everything it starts is recorded in .ui/*.pid and stopped by `ui.sh stop` (make ui-stop).
set -euo pipefail
cd "$(dirname "$0")/../.."

BIN=${BIN:-.venv/bin}
STATE=.ui
PREFECT_PORT=${PREFECT_PORT:-4200}
MLFLOW_PORT=${MLFLOW_PORT:-5000}
MLFLOW_DB=${MLFLOW_DB:-runs/demo/mlflow.db}
export PREFECT_HOME=${PREFECT_HOME:-$PWD/.prefect}
export PREFECT_API_URL="http://127.0.0.1:${PREFECT_PORT}/api"
eval "$("$BIN/python" -m vidtx.env)"  # the environment defaults every vidtx entry point applies
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false  # no huey job workers on a small machine

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
  start_background prefect-server "$BIN/prefect" server start --host 127.0.0.1 --port "$PREFECT_PORT"
  start_background mlflow-ui "$BIN/mlflow" ui --host 127.0.0.1 --port "$MLFLOW_PORT" \
    --backend-store-uri "sqlite:///$PWD/$MLFLOW_DB" --workers 1
  wait_for "http://127.0.0.1:${PREFECT_PORT}/api/health" prefect-server
  wait_for "http://127.0.0.1:${MLFLOW_PORT}/health" mlflow-ui
  "$BIN/prefect" work-pool inspect vidtx-process >/dev/null 2>&1 \
    || "$BIN/prefect" work-pool create vidtx-process --type process >/dev/null
  "$BIN/prefect" --no-prompt deploy --prefect-file prefect.yaml \
    --name shard-dataset/local --name train-model/local --name evaluate-model/local \
    --name register-model/local --name video-pipeline/demo >"$STATE/deploy.log" 2>&1 \
    || { echo "error: prefect deploy failed (see $STATE/deploy.log)" >&2; exit 1; }
  start_background prefect-worker "$BIN/prefect" worker start --pool vidtx-process
  cat <<MSG
Prefect UI: http://127.0.0.1:${PREFECT_PORT}   (deployments: video-pipeline/demo, train-model/local, ...)
MLflow UI:  http://127.0.0.1:${MLFLOW_PORT}   (tracking store: $MLFLOW_DB)
Run a flow: open Deployments -> video-pipeline/demo -> Run, or
            PREFECT_API_URL=$PREFECT_API_URL $BIN/prefect deployment run video-pipeline/demo
Stop:       make ui-stop
MSG
}

stop() {
  local pidfile pid
  for pidfile in "$STATE"/prefect-worker.pid "$STATE"/*.pid; do
    [ -e "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -INT "$pid" 2>/dev/null || true  # the Prefect worker wants a second signal
      for _ in $(seq 10); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
    echo "stopped $(basename "$pidfile" .pid) ($pid)"
  done
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
