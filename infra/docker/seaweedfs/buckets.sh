#!/bin/sh
# Creates the buckets $BUCKETS (space-separated) on the store, keeping those already there. Runs to
# completion after every start (compose: s3-buckets; Kubernetes: the Job s3-buckets).
set -eu
for bucket in $BUCKETS; do
  if ! echo "s3.bucket.list" | weed shell -master="$MASTER" -filer="$FILER" | grep -qw "$bucket"; then
    echo "s3.bucket.create -name $bucket" | weed shell -master="$MASTER" -filer="$FILER"
  fi
done
