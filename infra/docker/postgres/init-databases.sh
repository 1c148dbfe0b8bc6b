#!/usr/bin/env bash
# Creates one database and one login role per service (prefect, mlflow), each owned by its role.
# Postgres runs it once, on the first start with an empty data directory: compose mounts it into
# /docker-entrypoint-initdb.d, infra/k8s/services.yaml through a ConfigMap made from this file.
set -euo pipefail

create_database() {  # NAME PASSWORD
  psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres \
    --set=name="$1" --set=password="$2" <<'SQL'
CREATE ROLE :"name" LOGIN PASSWORD :'password';
CREATE DATABASE :"name" OWNER :"name";
SQL
}

create_database prefect "${PREFECT_DB_PASSWORD:?}"
create_database mlflow "${MLFLOW_DB_PASSWORD:?}"
