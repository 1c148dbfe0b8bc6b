"""What a location is made of, for a local path and a bucket URL alike: joining, naming, the folder above,
the bucket, a path relative to a root, an absolute form. No I/O (the standard library only); whether a
location is in a bucket is decided here and nowhere else outside `vidtx.storage`.

A location (`vidtx.locations.location` parses one from a config or a command line) is a `Path` on this
machine and a URL string in a bucket.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from vidtx.locations import REMOTE_SCHEMES, Location, location


def is_remote(where: Location) -> bool:
    return isinstance(where, str) and where.partition("://")[0] in REMOTE_SCHEMES


def local_path(where: Location) -> Path | None:
    """The file or folder on this machine that `where` is; None for a location in a bucket. For the
    readers whose way of reading differs (random access to a file here, ranged requests to a bucket)."""
    return None if is_remote(where) else Path(where)


def join(where: Location, *names: str) -> Location:
    """`where/name/...`, a location of the same kind."""
    if is_remote(where):
        return "/".join([str(where).rstrip("/"), *names])
    return Path(where).joinpath(*names)


def name_of(where: Location) -> str:
    """The last part of a location (a file's name)."""
    return str(where).rstrip("/").rsplit("/", 1)[-1]


def parent_of(where: Location) -> Location:
    """The folder (or bucket prefix) that holds `where`."""
    if is_remote(where):
        return str(where).rstrip("/").rsplit("/", 1)[0]
    return Path(where).parent


def bucket_of(where: Location) -> tuple[str, str]:
    """(scheme, bucket) of a location in a bucket."""
    scheme, _, rest = str(where).partition("://")
    return scheme, rest.split("/", 1)[0]


def absolute(where: Location) -> Location:
    """A local location as an absolute path (`~` expanded); a bucket URL as it is."""
    return where if is_remote(where) else Path(where).expanduser().absolute()


def beside(base: Location, entry: str) -> str:
    """What `entry` of a list kept in the folder `base` names: a URL or an absolute path as it is, a
    relative path inside `base`. An entry of a scheme vidtx cannot read stays as written."""
    try:
        where = location(entry)
    except ValueError:
        return entry
    return entry if is_remote(where) or Path(where).is_absolute() else str(join(base, entry))


def with_scheme(path: str, like: Location) -> str:
    """A path inside the file system of `like` as a location: in a bucket, pyarrow's file systems (and
    Ray Train's reports through them) give `bucket/key` without the scheme, which is put back."""
    if not is_remote(like) or "://" in path:
        return path
    scheme, _ = bucket_of(like)
    return f"{scheme}://{path}"


def relative_name(where: Location, root: Location) -> str:
    """`where` relative to `root` (posix) when it is inside it, else `where` as written."""
    if is_remote(where) or is_remote(root):
        prefix = f"{root}/"
        return str(where)[len(prefix) :] if str(where).startswith(prefix) else str(where)
    path = Path(where)
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)


def inside(written: str, root: Location) -> PurePosixPath | None:
    """The path `written` (as a list or annotation gives it) relative to `root`, normalised ('a/./b' ->
    'a/b'); None when it points outside the root ('../x', an absolute path or a URL elsewhere). The
    check is on the path as written: a symlink inside the root may lead anywhere, as its owner chose."""
    if is_remote(root) and written.startswith(f"{root}/"):
        written = written[len(f"{root}/") :]
    path = Path(written)
    if "://" in written or (path.is_absolute() and is_remote(root)):
        return None
    if path.is_absolute():
        if not path.is_relative_to(root):
            return None
        path = path.relative_to(root)
    normal = PurePosixPath(os.path.normpath(path.as_posix()))
    return None if normal.parts[:1] in ((), ("..",), (".",)) else normal
