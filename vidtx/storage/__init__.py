"""Where shards, sources and checkpoints live: a local path, `file://`, `s3://` or `gs://`, and the one
client that reaches them.

Locations are parsed by `vidtx.locations` (a `Path` on this machine, a URL string in a bucket); every
module joins, names, lists, reads, writes, copies and caches them through the functions here, which
work for both kinds: no other module builds a client or asks whether a location is in a bucket
(`paths`: a location's parts; `stat`: what is there; `objects`: reading, writing, copying; `ranged`:
an object read as a file that seeks). Local locations keep their plain file operations.

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
    check_buckets,
    configure,
    describe,
    endpoint,
    file_info,
    filesystem,
)
from vidtx.storage.objects import (
    STREAM_CHUNK,
    delete,
    download,
    download_in_parts,
    holds,
    local_copy,
    make_folder,
    open_input,
    read_bytes,
    read_range,
    read_ranges,
    read_text,
    remove_partial,
    sha256,
    staged,
    upload,
    write_text,
)
from vidtx.storage.paths import (
    absolute,
    beside,
    bucket_of,
    inside,
    is_remote,
    join,
    local_path,
    name_of,
    parent_of,
    relative_name,
    with_scheme,
)
from vidtx.storage.ranged import RANGE_CHUNK, ObjectFile, readable_file
from vidtx.storage.run_storage import run_storage
from vidtx.storage.stat import (
    FileState,
    blocking_file,
    exists,
    file_state,
    file_states,
    is_file,
    is_folder,
    names,
    size,
    walk,
)

__all__ = [
    "CHECK_ATTEMPTS",
    "RANGE_CHUNK",
    "RETRY_ATTEMPTS",
    "STREAM_CHUNK",
    "FileState",
    "ObjectFile",
    "StorageError",
    "absolute",
    "beside",
    "blocking_file",
    "bucket_of",
    "check",
    "check_buckets",
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
    "holds",
    "inside",
    "is_file",
    "is_folder",
    "is_remote",
    "join",
    "local_copy",
    "local_path",
    "make_folder",
    "name_of",
    "names",
    "open_input",
    "parent_of",
    "read_bytes",
    "read_range",
    "read_ranges",
    "read_text",
    "readable_file",
    "relative_name",
    "remove_partial",
    "run_storage",
    "sha256",
    "size",
    "staged",
    "upload",
    "walk",
    "with_scheme",
    "write_text",
]
