#!/bin/sh
# Creates the MLflow artifact bucket $BUCKET and MLflow's access key, allowed that bucket only.
# Runs to completion after every start (compose: minio-setup; Kubernetes: the Job minio-setup).
set -eu

mc alias set vidtx http://minio:9000 "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD"
mc mb --ignore-existing "vidtx/$BUCKET"

cat > /tmp/bucket-policy.json <<POLICY
{
  "Version": "2012-10-17",
  "Statement": [{
    "Effect": "Allow",
    "Action": ["s3:*"],
    "Resource": ["arn:aws:s3:::$BUCKET", "arn:aws:s3:::$BUCKET/*"]
  }]
}
POLICY
mc admin policy create vidtx "$BUCKET-readwrite" /tmp/bucket-policy.json
mc admin user add vidtx "$MLFLOW_S3_ACCESS_KEY" "$MLFLOW_S3_SECRET_KEY"
if ! mc admin user info vidtx "$MLFLOW_S3_ACCESS_KEY" --json | grep -q "$BUCKET-readwrite"; then
  mc admin policy attach vidtx "$BUCKET-readwrite" --user "$MLFLOW_S3_ACCESS_KEY"
fi
