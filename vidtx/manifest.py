"""The manifest of a sharded split: what the tars hold, what was rejected, and one content hash.

`<split>.manifest.json` is written last by the sharding job, so its presence means the split is
complete; loaders read shard names from it rather than globbing the folder. `content_hash` depends
only on the data (shard digests, sample counts, class names), not on how the job ran (process
count, paths), so training can record it as the dataset's identity.

Split names become file names (`shard_name`, `manifest_path`, `rejects_path`), so they are checked
there (`check_split`); file names and keys become JSON, so they are recorded with `recorded_name`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError

from vidtx import storage
from vidtx.locations import Location
from vidtx.storage import join

MANIFEST_SUFFIX = ".manifest.json"
REJECTS_SUFFIX = ".rejects.jsonl"
INDEX_SUFFIX = ".index.json"
# A sample of the video store holds the video under its container's extension (mp4 after a re-encode);
# one of the frames store holds the JPEG frames back to back under FRAMES_MEMBER, their byte offsets
# in its json ("offsets", one per frame plus the end).
VIDEO_EXTENSIONS = (
    *(".mp4", ".webm", ".mkv", ".avi", ".mov", ".m4v"),
    # containers people have that PyAV decodes (tested: MPEG-TS, MPEG-PS, 3GP, FLV, ASF, Ogg)
    *(".ts", ".mpg", ".mpeg", ".3gp", ".flv", ".wmv", ".ogv"),
)
FRAMES_MEMBER = "frames"
# A split names files of the shard folder, so it is a plain name: no '/', no leading '.' (nor '..'),
# nothing that webdataset reads in a shard URL ('{a,b}' braces, '::'), no bytes that are not UTF-8.
SPLIT_NAME = re.compile(r"\w[\w.-]{0,99}")


def check_split(split: str) -> str:
    """`split`, or ValueError when it cannot name files (`SPLIT_NAME`)."""
    if not SPLIT_NAME.fullmatch(split):
        raise ValueError(
            f"split {split!r} cannot name files: a split name is letters, digits, '_', '-' and '.' "
            "(not first), at most 100 characters"
        )
    return split


def shard_name(split: str, index: int) -> str:
    """`<split>-NNNNNN.tar`, the name of a split's tar in the shard folder."""
    return f"{check_split(split)}-{index:06d}.tar"


def index_name(tar_name: str) -> str:
    """`<split>-NNNNNN.index.json`, the `MemberIndex` beside a frames-store tar."""
    return tar_name.removesuffix(".tar") + INDEX_SUFFIX


class IndexedSample(BaseModel):
    """One sample of a frames-store tar, as its `MemberIndex` records it."""

    key: str  # the sample's key in the tar
    meta: str  # its json member, as text
    frames: tuple[int, int]  # (offset in the tar, size) of its frames member's bytes


class MemberIndex(BaseModel):
    """Where the members of a frames-store tar are, written beside it by the sharding job. A reader of
    a bucket reads this once per shard and then only the byte ranges of the frames a clip samples
    (one request per clip), never the rest of the tar."""

    samples: list[IndexedSample]


def recorded_name(text: str) -> str:
    """A file name or key as it is recorded in JSON (manifests, rejects, the samples' json), one to
    one: Python keeps the bytes of a name that are not UTF-8 as lone surrogates, which JSON cannot
    hold; they become `\\xNN` escapes (`\\xffclip.mp4`), and a backslash of the name itself is doubled,
    so that a name spelling `x\\xe9` reads `x\\\\xe9` and never as the byte 0xE9. Reading `\\\\` as a
    backslash and `\\xNN` as the byte NN gives the name back. Applied once, where a name of the file
    system is recorded (the plan, the ignored list): a recorded name is never recorded again."""
    escaped = text.replace("\\", "\\\\")
    return escaped.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


class ShardInfo(BaseModel):
    """One finished tar of a split, as recorded in the manifest; loaders and integrity checks use it."""

    model_config = ConfigDict(frozen=True)

    name: str  # tar file name, relative to the shards folder: <split>-NNNNNN.tar
    samples: int  # videos written into the tar (rejects excluded)
    bytes: int  # size of the tar file
    sha256: str  # hex digest of the tar file


class Reject(BaseModel):
    """A video the shard stage left out, and why; listed in the manifest and `<split>.rejects.jsonl`."""

    model_config = ConfigDict(frozen=True)

    key: str  # the video's key in the source dataset (not a tar sample key), as `recorded_name` records it
    path: str  # source path, relative to the dataset root when possible (`recorded_name`)
    label: int  # label id (a multi-label row's first); -1 when the annotation names no known class
    reason: str  # "<kind>: <detail>" or "<kind> (<detail>)"; see `reason_kind`


def reason_kind(reason: str) -> str:
    """A reject reason without its detail: 'not a readable video container (Invalid data ...)' ->
    'not a readable video container', 'too short: 2 frames < min_frames 4' -> 'too short'."""
    return re.split(r"[:(]", reason, maxsplit=1)[0].strip()


def reason_counts(rejects: Iterable[Reject]) -> list[tuple[str, int]]:
    """(reason kind, count) over `rejects`, the most frequent first."""
    return Counter(reason_kind(reject.reason) for reject in rejects).most_common()


class Manifest(BaseModel):
    """`<split>.manifest.json`: the hand-off from the shard stage to training and evaluation.

    Written by `finalize_split` once every shard of the split is complete; read with
    `load_manifest`, which remembers the folder so that `shard_urls()` can resolve the tars.
    """

    split: str
    shards: list[ShardInfo]  # in order of shard index
    num_samples: int  # videos in all tars (rejects excluded)
    class_names: list[str]  # index = label id
    counts_per_class: dict[str, int]  # written videos per class name, of each label (0 for a class with none)
    rejects: list[Reject]
    store: Literal["video", "frames"] = "video"  # what the samples hold (see FRAMES_MEMBER)
    # Samples carry label sets: their json holds "labels" (ids) and "label_names" beside "label" and
    # "label_name", the first of them. False (single-label, and manifests written before): one label each.
    multi_label: bool = False
    config: dict[str, Any]  # the ShardConfig that wrote the split, as JSON
    content_hash: str  # sha256 of class names and shard names, counts and digests: the data's identity
    _root: Location | None = PrivateAttr(None)  # folder or bucket prefix the manifest was loaded from

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def label_map(self) -> dict[str, int]:
        return {name: index for index, name in enumerate(self.class_names)}

    def summary(self) -> str:
        """One line for people: what the split holds and what was left out."""
        rejected = len(self.rejects)
        return f"{self.split}: {self.num_samples} samples in {len(self.shards)} shards, {rejected} rejected"

    def shard_urls(self, root: Location | None = None) -> list[str]:
        """Paths or URLs of the tars, in order (`root` defaults to where the manifest was loaded from)."""
        folder = root or self._root
        if folder is None:
            raise ValueError("manifest has no folder: pass root= or use load_manifest()")
        return [str(join(folder, shard.name)) for shard in self.shards]

    def save(self, folder: Location) -> Location:
        return storage.write_text(manifest_path(folder, self.split), self.model_dump_json(indent=2) + "\n")


def damaged_shards(manifest: Manifest, *, check_sha256: bool = True) -> list[str]:
    """One line per shard of the manifest that is missing, has another size or (when
    `check_sha256`, which reads every byte) another sha256 than the manifest records."""
    problems = []
    for shard, url in zip(manifest.shards, manifest.shard_urls(), strict=True):
        if (size := storage.size(url)) is None:
            problems.append(f"{shard.name}: missing")
        elif size != shard.bytes:
            problems.append(
                f"{shard.name}: {size} bytes, the manifest says {shard.bytes} (truncated or replaced)"
            )
        elif check_sha256 and storage.sha256(url) != shard.sha256:
            problems.append(f"{shard.name}: sha256 mismatch against the manifest (corrupted or replaced)")
    return problems


def content_hash(shards: list[ShardInfo], class_names: list[str]) -> str:
    payload = {"classes": class_names, "shards": [[s.name, s.samples, s.sha256] for s in shards]}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def manifest_path(shards_dir: Location, split: str) -> Location:
    return join(shards_dir, f"{check_split(split)}{MANIFEST_SUFFIX}")


def rejects_path(shards_dir: Location, split: str) -> Location:
    return join(shards_dir, f"{check_split(split)}{REJECTS_SUFFIX}")


def load_manifest(shards_dir: Location, split: str) -> Manifest:
    path = manifest_path(shards_dir, split)
    if not storage.is_file(path):
        raise FileNotFoundError(f"{path}: no manifest (shard the '{split}' split with `vidtx shard` first)")
    try:
        manifest = Manifest.model_validate_json(storage.read_text(path))
    except ValidationError as err:
        raise ValueError(f"{path}: not a valid manifest ({err.errors()[0]['msg']})") from err
    manifest._root = shards_dir if isinstance(shards_dir, str) else Path(shards_dir)
    return manifest


def merged_class_names(manifests: Iterable[Manifest]) -> list[str]:
    """The label set of several splits trained on together: their class names merged, in the order
    they first appear (split after split, each in its label-id order)."""
    return list(dict.fromkeys(name for manifest in manifests for name in manifest.class_names))


def find_splits(shards_dir: Location) -> list[str]:
    """Splits that have a manifest in `shards_dir`."""
    return [name.removesuffix(MANIFEST_SUFFIX) for name in storage.names(shards_dir, MANIFEST_SUFFIX)]
