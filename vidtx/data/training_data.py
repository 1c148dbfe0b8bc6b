"""The training split of one shard set or of several mixed by weight (`data.sources`).

Each source is a shard folder with its own manifest (checked on its own). Their labels are merged by
class name into one label set, in the order the names first appear (source after source, each in its
label-id order: `vidtx.manifest.merged_class_names`): the model's logits, the checkpoint's
`class_names.json` and the registered model follow it. An epoch is as many samples as the sources
have together; each sample of a rank's stream comes from source i with probability
weight_i / sum(weights), drawn by a generator seeded by (seed, epoch, rank, DataLoader worker)
(`vidtx.data.shares.MixedSamples`), so an epoch's stream is the same every time it is read (exact
resume replays it). A source drawn more often than its size asks for is read again within the epoch
(pass after pass, as one source is), a source drawn less is partly read.

`data.balance: classes` passes over samples of frequent classes before the shuffle buffer: a sample
of class c is kept with probability min_frequency / frequency(c), the frequencies being those of the
mixed stream (the sources' class counts in their manifests, weighted), so every class comes equally
often. What is passed over is read (its tar is read anyway) but never decoded.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vidtx.config import DataConfig
from vidtx.locations import Location
from vidtx.manifest import Manifest, load_manifest, merged_class_names


@dataclass(frozen=True)
class TrainingSource:
    shards: Location
    weight: float  # its share of the samples: the weights sum to 1
    manifest: Manifest  # of the training split
    labels: tuple[int, ...]  # its label id -> the merged label set's


@dataclass(frozen=True)
class TrainingData:
    """The sources a run trains on and the label set they make together."""

    sources: tuple[TrainingSource, ...]
    class_names: list[str]  # index = the model's logit

    @classmethod
    def of(
        cls, shards: Sequence[Location], weights: Sequence[float], manifests: Sequence[Manifest]
    ) -> TrainingData:
        class_names = merged_class_names(manifests)
        total = sum(weights)
        sources = tuple(
            TrainingSource(where, weight / total, manifest, tuple(relabelled(manifest, class_names)))
            for where, weight, manifest in zip(shards, weights, manifests, strict=True)
        )
        return cls(sources, class_names)

    @property
    def num_samples(self) -> int:
        return sum(source.manifest.num_samples for source in self.sources)

    @property
    def multi_label(self) -> bool:
        """Whether a source's samples carry label sets (`Manifest.multi_label`)."""
        return any(source.manifest.multi_label for source in self.sources)

    @property
    def weights(self) -> list[float]:
        return [source.weight for source in self.sources]

    @property
    def content_hash(self) -> str:
        """The data's identity: one source's manifest hash, or a hash of the sources' with their weights."""
        if len(self.sources) == 1:
            return self.sources[0].manifest.content_hash
        mixed = [[source.manifest.content_hash, source.weight] for source in self.sources]
        return hashlib.sha256(json.dumps(mixed).encode()).hexdigest()

    def class_frequencies(self) -> np.ndarray:
        """(classes,) how often each merged class comes in the mixed stream (sums to 1; of a multi-label
        split, among all the labels of its videos)."""
        frequencies = np.zeros(len(self.class_names))
        for source in self.sources:
            counts = source.manifest.counts_per_class
            total = sum(counts.values())
            for name, label in zip(source.manifest.class_names, source.labels, strict=True):
                frequencies[label] += source.weight * counts.get(name, 0) / max(total, 1)
        return frequencies

    def keep_probabilities(self) -> np.ndarray:
        """(classes,) `data.balance: classes`: the chance that a sample of each class is kept."""
        frequencies = self.class_frequencies()
        present = frequencies > 0
        kept = np.zeros_like(frequencies)
        kept[present] = frequencies[present].min() / frequencies[present]
        return kept


def training_data(data: DataConfig, manifests: Sequence[Manifest] | None = None) -> TrainingData:
    """`data`'s training sources with their manifests (`manifests`, else loaded)."""
    sources = data.training_sources()
    if manifests is None:
        manifests = [load_manifest(source.shards, data.train_split) for source in sources]
    return TrainingData.of([s.shards for s in sources], [s.weight for s in sources], manifests)


UNLABELED = -1  # a sample's label in an unlabeled split (shard.format: unlabeled)


def relabel(labels: Sequence[int], label: int) -> int:
    """A sample's label id in a label set through `relabelled`'s mapping; an unlabeled sample's stays
    unlabeled (only pretraining reads those: it ignores labels)."""
    return UNLABELED if label == UNLABELED else labels[label]


def relabelled(manifest: Manifest, class_names: Sequence[str]) -> list[int]:
    """The index in `class_names` (a model's label set) of each of `manifest`'s label ids; a ValueError
    naming the classes of the split that the label set lacks."""
    if missing := [name for name in manifest.class_names if name not in class_names]:
        raise ValueError(
            f"split {manifest.split!r} has classes the model does not know: {', '.join(missing)} "
            f"(its classes: {', '.join(class_names)})"
        )
    return [list(class_names).index(name) for name in manifest.class_names]
