"""Locations: a local path, or the URL of a folder or file in a bucket (`s3://`, `gs://`).

A location is a `Path` when it is on this machine (a `file://` URL becomes its path) and a URL
string when it is in a bucket. `location()` is the one parser of what a config or a command line
holds; everything done with a location (join, name, list, open, read, write, copy, cache) is in
`vidtx.storage`. The standard library and pydantic only, so that the config schema can type its fields
with `StorageLocation`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator, PlainSerializer, WithJsonSchema

REMOTE_SCHEMES = ("s3", "gs")
Location = Path | str  # a local folder or file, or the URL of one in a bucket


def location(value: str | os.PathLike[str]) -> Location:
    """`value` as a location: a URL of a remote scheme (trailing '/' dropped), otherwise a Path."""
    if isinstance(value, Path):
        return value
    text = os.fspath(value)
    scheme, _, rest = text.partition("://")
    if not rest:
        return Path(text)
    if scheme in REMOTE_SCHEMES:
        if not rest.split("/", 1)[0]:
            raise ValueError(f"{text}: no bucket name after {scheme}://")
        return text.rstrip("/")
    if scheme == "file":
        return Path("/" + rest.lstrip("/"))
    raise ValueError(f"{text}: unsupported storage scheme {scheme!r} (a path, file://, s3:// or gs://)")


# A config field that holds a location: validated by `location`, written back as the text it was.
StorageLocation = Annotated[
    Location,
    BeforeValidator(location),
    PlainSerializer(str, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "path-or-url"}),
]
