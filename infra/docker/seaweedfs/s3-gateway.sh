#!/bin/sh
# The S3 gateway of the shared services (compose: s3; Kubernetes: the Deployment s3). Writes its
# identities from the environment into a file only it reads: the administrator (every bucket) and
# MLflow's key (its artifact bucket $BUCKET only); then runs `weed s3` against the store's filer.
# Every request must be signed with one of these keys: an unsigned one gets 403 AccessDenied.
set -eu
umask 077
cat > /tmp/s3.json <<JSON
{"identities": [
  {"name": "admin", "actions": ["Admin", "Read", "Write", "List", "Tagging"],
   "credentials": [{"accessKey": "$S3_ADMIN_ACCESS_KEY", "secretKey": "$S3_ADMIN_SECRET_KEY"}]},
  {"name": "mlflow", "actions": ["Read:$BUCKET", "Write:$BUCKET", "List:$BUCKET", "Tagging:$BUCKET"],
   "credentials": [{"accessKey": "$MLFLOW_S3_ACCESS_KEY", "secretKey": "$MLFLOW_S3_SECRET_KEY"}]}
]}
JSON
exec weed s3 -filer="$FILER" -ip.bind=0.0.0.0 -port="${S3_PORT:-8333}" -config=/tmp/s3.json \
  -port.iceberg=0 -port.lance=0
