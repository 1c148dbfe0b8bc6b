"""Planning a sharding job: which video goes into which tar, under which key.

Pure and deterministic: per split, records sorted by key, shuffled with a seeded RNG (so each shard
mixes classes), cut into shards of at most `max_samples_per_shard` samples and about
`max_bytes_per_shard` bytes of source video. Sample keys are `<shard:06d><position:06d>`; a rejected
video leaves a gap, so keys never depend on which other videos were bad.
"""

from __future__ import annotations

import hashlib
import json
import random

from pydantic import BaseModel, ConfigDict

from vidtx import storage
from vidtx.config import ConfigError, ShardConfig
from vidtx.locations import Location
from vidtx.manifest import recorded_name, shard_name
from vidtx.shard.records import UNLABELLED, normalise_split
from vidtx.shard.sources import Source, VideoRecord, read_source

TAR_OVERHEAD_BYTES = 2048  # per sample: two member headers, the json member, block padding


class ShardItem(BaseModel):
    """One planned video of a shard: where to read it and the key it gets in the tar."""

    model_config = ConfigDict(frozen=True)

    key: str  # sample key inside the tar
    source_key: str  # the video's key in the source dataset, recorded (`recorded_name`) in the sample's json
    path: str  # where to read the video
    source: str  # the path recorded in the sample's json (relative to the dataset root when possible)
    label: int  # label id (index into ShardSpec.class_names); a multi-label item's first
    problem: str | None = None  # an annotation problem: the item is a reject without being read
    labels: tuple[int, ...] | None = None  # a multi-label split's item: every label id; None: single-label

    @property
    def label_ids(self) -> tuple[int, ...]:
        """Every label id of the item (none for an unlabeled dataset's video)."""
        ids = self.labels if self.labels is not None else (self.label,)
        return tuple(label for label in ids if label != UNLABELLED)


class ShardSpec(BaseModel):
    """One planned tar: which videos, in which order, under which keys.

    Made by `plan_shards`, handed to `write_shard` (one Prefect task or pool job per spec).
    """

    model_config = ConfigDict(frozen=True)

    split: str
    index: int  # shard number within the split: the NNNNNN of the tar name
    items: tuple[ShardItem, ...]  # in tar order
    class_names: tuple[str, ...]  # the source's label map, recorded: index = label id
    multi_label: bool = False  # items carry label sets (`ShardItem.labels`)

    @property
    def name(self) -> str:
        return shard_name(self.split, self.index)

    def fingerprint(self, cfg: ShardConfig) -> str:
        """Changes whenever the bytes of the shard could: its plan or the per-video processing."""
        # Defaults left out: a single-label spec keeps the fingerprint it had before label sets existed.
        spec = self.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
        recipe = {"spec": spec, "min_frames": cfg.min_frames}
        recipe["reencode"] = cfg.reencode.model_dump(mode="json") if cfg.reencode else None
        if cfg.store == "frames":  # absent for the video store: its shards keep their fingerprints
            recipe["frames"] = {
                "fps": cfg.fps,
                "short_side": cfg.short_side,
                "jpeg_quality": cfg.jpeg_quality,
            }
        return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def label_set(cfg: ShardConfig) -> list[str] | None:
    """`shard.classes`, or the names in `shard.classes_file`, or None (every label in the annotations)."""
    if cfg.classes_file is None:
        return cfg.classes
    return [line.strip() for line in storage.read_text(cfg.classes_file).splitlines() if line.strip()]


def read_dataset(cfg: ShardConfig) -> Source:
    """The dataset `cfg` names (its records and its ignored files)."""
    return read_source(
        cfg.source,
        cfg.format,
        video_root=cfg.video_root,
        classes=label_set(cfg),
        label_separator=cfg.label_separator,
    )


def plan_shards(cfg: ShardConfig, source: Source | None = None) -> list[ShardSpec]:
    """Deterministic assignment of the source's videos to shards, for every requested split
    (`source`: the dataset when already read with `read_dataset`)."""
    _check_output(cfg.output)
    if source is None:
        source = read_dataset(cfg)
    splits = [normalise_split(split) for split in cfg.splits] if cfg.splits else source.splits
    unknown = set(splits) - set(source.splits)
    if unknown:
        raise ValueError(f"{cfg.source}: no videos in split(s) {sorted(unknown)}; found {source.splits}")
    specs = []
    class_names = tuple(map(recorded_name, source.class_names))
    for split in splits:
        records = sorted(source.split_records(split), key=lambda record: record.key)
        random.Random(f"{cfg.seed}/{split}").shuffle(records)
        for index, group in enumerate(_pack(records, cfg.max_samples_per_shard, cfg.max_bytes_per_shard)):
            items = tuple(
                ShardItem(
                    key=f"{index:06d}{position:06d}",
                    source_key=recorded_name(record.key),
                    path=str(record.path),
                    source=recorded_name(storage.relative_name(record.path, source.root)),
                    label=record.label,
                    problem=record.problem,
                    labels=record.labels,
                )
                for position, record in enumerate(group)
            )
            specs.append(
                ShardSpec(
                    split=split,
                    index=index,
                    items=items,
                    class_names=class_names,
                    multi_label=source.multi_label,
                )
            )
    return specs


def _pack(records: list[VideoRecord], max_samples: int, max_bytes: int) -> list[list[VideoRecord]]:
    """Consecutive groups of at most `max_samples` records and about `max_bytes` tar bytes."""
    groups: list[list[VideoRecord]] = [[]]
    group_bytes = 0
    states = storage.file_states([record.path for record in records])
    for record, state in zip(records, states, strict=True):
        size = (state[0] if record.problem is None and state else 0) + TAR_OVERHEAD_BYTES
        if groups[-1] and (len(groups[-1]) >= max_samples or group_bytes + size > max_bytes):
            groups.append([])
            group_bytes = 0
        groups[-1].append(record)
        group_bytes += size
    return groups


def _check_output(output: Location) -> None:
    """ConfigError before any work when `shard.output` cannot become a folder (it, or a parent of
    it, is a file); a `StorageError` naming it when its bucket cannot be used."""
    storage.check(output)
    if (file := storage.blocking_file(output)) is not None:
        raise ConfigError(f"shard.output {output}: {file} is a file, not a folder")
