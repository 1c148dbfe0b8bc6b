"""Where shards, sources and checkpoints live: a local path, `file://`, `s3://` or `gs://`, and the one
client that reaches them.

Locations are parsed by `vidtx.locations` (a `Path` on this machine, a URL string in a bucket); every
module reads and writes them through the functions here, so no other module builds a client. Local
locations keep their plain file operations.

The client is pyarrow's file systems: Ray Train keeps checkpoints through one already, its S3 client
(the AWS SDK for C++) reads byte ranges (`read_at`) without holding the GIL, and it is installed with
Ray. Endpoint, region and credentials come from the environment as boto3 reads them
(`AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`, `AWS_DEFAULT_REGION`, `AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`); the endpoint and region are also passed explicitly, so a client that does
not read the variables gets them too. No message here ever holds a credential.
"""

from vidtx.storage.client import (
    CHECK_ATTEMPTS,
    RETRY_ATTEMPTS,
    StorageError,
    check,
    configure,
    describe,
    endpoint,
    file_info,
    filesystem,
)
from vidtx.storage.objects import (
    STREAM_CHUNK,
    FileState,
    delete,
    download,
    download_in_parts,
    exists,
    file_state,
    file_states,
    is_file,
    local_copy,
    names,
    open_input,
    read_bytes,
    read_range,
    read_text,
    size,
    staged,
    upload,
    walk,
    write_text,
)

__all__ = [
    "CHECK_ATTEMPTS",
    "RETRY_ATTEMPTS",
    "STREAM_CHUNK",
    "FileState",
    "StorageError",
    "check",
    "configure",
    "delete",
    "describe",
    "download",
    "download_in_parts",
    "endpoint",
    "exists",
    "file_info",
    "file_state",
    "file_states",
    "filesystem",
    "is_file",
    "local_copy",
    "names",
    "open_input",
    "read_bytes",
    "read_range",
    "read_text",
    "size",
    "staged",
    "upload",
    "walk",
    "write_text",
]
