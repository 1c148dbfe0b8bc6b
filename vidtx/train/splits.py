"""The splits a run reads, checked before any compute.

A missing split used to be found by the Ray workers: a dataset sharded without a `val` split (a
plain folder of videos gives only `train`) trained every step and then died at the final validation.
Now the training split and the evaluation split are required up front (one line naming the field and
the splits the folder has), and a missing validation split only turns validation off, with one
warning when the run starts: the training is still useful, and evaluation checks its own split.
"""

from __future__ import annotations

import logging

from vidtx import storage
from vidtx.config import ConfigError, DataConfig, PipelineConfig
from vidtx.data.training_data import TrainingData, relabelled, training_data
from vidtx.locations import Location
from vidtx.manifest import MANIFEST_SUFFIX, Manifest, find_splits, load_manifest, manifest_path

logger = logging.getLogger(__name__)


def require_split(shards: Location, split: str, field: str, folder_field: str = "data.shards") -> Manifest:
    """The manifest of `split`; when there is none, FileNotFoundError naming `field` and what is there
    (no folder at all: naming `folder_field`). A bucket that cannot be used is a `StorageError`
    naming it (unreachable, refused, missing)."""
    storage.check(shards)
    if not storage.is_folder(shards):
        raise FileNotFoundError(f"{folder_field} {shards}: no such folder (write it with `vidtx shard`)")
    if not storage.is_file(manifest_path(shards, split)):
        found = ", ".join(find_splits(shards)) or "none"
        raise FileNotFoundError(
            f"{field} {split!r}: no {split}{MANIFEST_SUFFIX} in {shards} (splits there: {found}); "
            f"shard that split or set {field}"
        )
    return load_manifest(shards, split)


def training_splits(data: DataConfig, labeled: bool = True) -> tuple[TrainingData, Manifest | None]:
    """The training data, each source's training split required (with labels, unless not `labeled`:
    pretraining), and the validation split, whose classes the training data must have; a missing
    validation split is logged once: the run trains without validation and keeps its latest
    checkpoints."""
    folders = [f"data.sources[{i}].shards" for i in range(len(data.sources))] or ["data.shards"]
    manifests = [
        require_split(source.shards, data.train_split, "data.train_split", folder)
        for source, folder in zip(data.training_sources(), folders, strict=True)
    ]
    if labeled:
        for manifest, folder in zip(manifests, folders, strict=True):
            require_labels(manifest, folder)
    training = training_data(data, manifests)
    if not storage.is_file(manifest_path(data.shards, data.val_split)):
        logger.warning(
            "data.val_split %r has no manifest in %s (splits there: %s): training without validation",
            data.val_split,
            data.shards,
            ", ".join(find_splits(data.shards)),
        )
        return training, None
    validation = load_manifest(data.shards, data.val_split)
    relabelled(validation, training.class_names)  # a class never trained on fails here, not at step 1
    return training, validation


def evaluation_split(config: PipelineConfig) -> Manifest:
    """The manifest of `eval.split`, required before a model is loaded or trained for evaluation."""
    return require_labels(require_split(config.data.shards, config.eval.split, "eval.split"), "data.shards")


def require_labels(manifest: Manifest, folder_field: str) -> Manifest:
    """`manifest`, or ConfigError when its split has no labels (`shard.format: unlabeled`)."""
    if not manifest.class_names:
        raise ConfigError(
            f"{folder_field}: split {manifest.split!r} has no labels (sharded with shard.format: "
            "unlabeled): training and evaluation need labelled shards; pretrain on it with `vidtx pretrain`"
        )
    return manifest
