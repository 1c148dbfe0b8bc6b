#!/bin/sh
# Creates the buckets $BUCKETS (space-separated) on the store, keeping those already there. Runs to
# completion after every start (compose: s3-buckets; Kubernetes: the Job s3-buckets).
set -eu
for bucket in $BUCKETS; do
  # `s3.bucket.create` fails on a bucket that is there; the list's first column is each bucket's name
  if ! echo "s3.bucket.list" | weed shell -master="$MASTER" -filer="$FILER" \
      | awk -v name="$bucket" '$1 == name {found = 1} END {exit !found}'; then
    echo "s3.bucket.create -name $bucket" | weed shell -master="$MASTER" -filer="$FILER"
  fi
done
