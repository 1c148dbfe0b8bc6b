"""A local S3 server: moto's server mode, speaking HTTP on 127.0.0.1 (its in-process mocks are never
used). The tests start one per session (`tests/conftest.py`), the object-storage benchmark one per
run; `make s3` runs one in the foreground for people.

What of S3 the tests rely on is what S3 itself guarantees and moto implements: an object appears
only once its upload is complete (single PUT or multipart), single byte ranges per GET, listing by
prefix. moto keeps objects in memory and checks no credentials unless asked to.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from infra.local.processes import wait_for_port


@contextlib.contextmanager
def s3_server(port: int, log: Path, authenticated_after: int | None = None) -> Iterator[str]:
    """moto's S3 server on 127.0.0.1:`port` for the block, its request log in `log`; yields its
    endpoint URL. With `authenticated_after` = n, requests after the first n must be signed with
    the keys of an IAM user created on it (moto's IAM emulation); otherwise none are checked."""
    environment = dict(os.environ)
    if authenticated_after is not None:
        environment["INITIAL_NO_AUTH_ACTION_COUNT"] = str(authenticated_after)
    with log.open("ab") as output:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=output,
            stderr=output,
            env=environment,
        )
    try:
        wait_for_port(port, server, "moto's S3 server", timeout=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def requests(log: Path, since: int = 0) -> list[str]:
    """'METHOD /bucket/key' of each request the server logged after byte `since` of its log."""
    lines = log.read_bytes()[since:].decode(errors="replace").splitlines()
    return [" ".join(line.split('"')[1].split()[:2]) for line in lines if line.count('"') >= 2]


def create_user(endpoint: str, name: str) -> tuple[str, str]:
    """An IAM user allowed every S3 action on a server started with `authenticated_after=3` (these
    are its 3 unchecked requests): (access key id, secret access key)."""
    import boto3

    iam = boto3.client("iam", endpoint_url=endpoint)
    iam.create_user(UserName=name)
    key = iam.create_access_key(UserName=name)["AccessKey"]
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
    iam.put_user_policy(UserName=name, PolicyName="s3", PolicyDocument=json.dumps(policy))
    return key["AccessKeyId"], key["SecretAccessKey"]


def create_bucket(endpoint: str, name: str) -> str:
    """Create bucket `name` on the server; returns its URL, `s3://name`."""
    import boto3

    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=name)
    return f"s3://{name}"
