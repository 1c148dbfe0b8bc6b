"""The layout of a shard's tar: how a sample's members are written (webdataset's `TarWriter` fields,
members sorted by name, files streamed from disk), and the `MemberIndex` of a finished frames-store tar
(written by the shard stage; `add_indexes` adds those of shards written before it did)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import webdataset as wds

from vidtx import storage
from vidtx.locations import Location
from vidtx.manifest import FRAMES_MEMBER, IndexedSample, MemberIndex, find_splits, index_name, load_manifest
from vidtx.storage import join, name_of, parent_of


def write_sample(writer: wds.TarWriter, sample: dict[str, str | bytes | Path]) -> None:
    """What `writer.write(sample)` writes (members sorted by name, TarWriter's header fields), except
    that a member given as a file is streamed from disk rather than read whole: a video can be larger
    than memory."""
    key = sample["__key__"]
    for name in sorted(name for name in sample if name != "__key__"):
        content = sample[name]
        info = tarfile.TarInfo(f"{key}.{name}")
        info.mtime, info.mode, info.uname, info.gname = writer.mtime, writer.mode, writer.user, writer.group
        if isinstance(content, Path):
            info.size = content.stat().st_size
            with content.open("rb") as file:
                writer.tarstream.addfile(info, file)
        else:
            info.size = len(content)
            writer.tarstream.addfile(info, io.BytesIO(content))


def member_index(tar: Path) -> MemberIndex:
    """The `MemberIndex` of a finished frames-store tar (its headers only are read, and the json members)."""
    samples = {}
    with tarfile.open(tar, "r:") as archive:
        for info in archive:
            key, _, member = info.name.partition(".")
            if member == FRAMES_MEMBER:
                samples.setdefault(key, {})["frames"] = (info.offset_data, info.size)
            elif member == "json":
                samples.setdefault(key, {})["meta"] = archive.extractfile(info).read().decode()  # type: ignore[union-attr]
    return MemberIndex(samples=[IndexedSample(key=key, **members) for key, members in samples.items()])


def add_indexes(shards_dir: Location) -> list[str]:
    """Write the missing `<tar>.index.json` of every frames-store split in `shards_dir` (a tar in a
    bucket is downloaded once to read its headers): the indexes written."""
    written = []
    for split in find_splits(shards_dir):
        manifest = load_manifest(shards_dir, split)
        if manifest.store != "frames":
            continue
        for url in manifest.shard_urls():
            index = join(parent_of(url), index_name(name_of(url)))
            if storage.exists(index):
                continue
            with storage.local_copy(url) as tar:
                storage.write_text(index, member_index(tar).model_dump_json())
            written.append(index)
    return written
