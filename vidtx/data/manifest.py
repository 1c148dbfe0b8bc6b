"""The manifest of a sharded split: what the tars hold, what was rejected, and one content hash.

`<split>.manifest.json` is written last by the sharding job, so its presence means the split is
complete; loaders read shard names from it rather than globbing the folder. `content_hash` depends
only on the data (shard digests, sample counts, class names), not on how the job ran (process
count, paths), so training can record it as the dataset's identity.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr

MANIFEST_SUFFIX = ".manifest.json"


class ShardInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    samples: int
    bytes: int
    sha256: str


class Reject(BaseModel):
    model_config = ConfigDict(frozen=True)

    key: str
    path: str
    label: int
    reason: str


class Manifest(BaseModel):
    split: str
    shards: list[ShardInfo]
    num_samples: int
    class_names: list[str]  # index = label id
    counts_per_class: dict[str, int]
    rejects: list[Reject]
    config: dict[str, Any]
    content_hash: str
    _root: Path | None = PrivateAttr(None)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def label_map(self) -> dict[str, int]:
        return {name: index for index, name in enumerate(self.class_names)}

    def shard_urls(self, root: Path | None = None) -> list[str]:
        """Paths of the tars, in order (`root` defaults to the folder the manifest was loaded from)."""
        folder = root or self._root
        if folder is None:
            raise ValueError("manifest has no folder: pass root= or use load_manifest()")
        return [str(Path(folder) / shard.name) for shard in self.shards]

    def save(self, folder: Path) -> Path:
        path = Path(folder) / f"{self.split}{MANIFEST_SUFFIX}"
        path.write_text(self.model_dump_json(indent=2) + "\n")
        return path


def content_hash(shards: list[ShardInfo], class_names: list[str]) -> str:
    payload = {"classes": class_names, "shards": [[s.name, s.samples, s.sha256] for s in shards]}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def load_manifest(shards_dir: Path, split: str) -> Manifest:
    path = Path(shards_dir) / f"{split}{MANIFEST_SUFFIX}"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no manifest (shard the '{split}' split with `vidtx shard` first)")
    manifest = Manifest.model_validate_json(path.read_text())
    manifest._root = Path(shards_dir)
    return manifest


def find_splits(shards_dir: Path) -> list[str]:
    """Splits that have a manifest in `shards_dir`."""
    return sorted(p.name.removesuffix(MANIFEST_SUFFIX) for p in Path(shards_dir).glob(f"*{MANIFEST_SUFFIX}"))
