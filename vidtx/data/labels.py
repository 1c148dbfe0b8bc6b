"""A sample's labels as a loader gives them: one label id, or a multi-hot vector over the label set.

A sample's json holds its label id in "label"; a sample of a multi-label split
(`vidtx.manifest.Manifest.multi_label`) also holds every label id in "labels" ("label" is the first).
The ids are the split's, mapped into the model's label set (`vidtx.data.training_data.relabel`). A loader
built with `multi_label` gives float32 multi-hot (K,) targets over the K classes of the label set (a
single-label sample's is one-hot); one built without gives the int64 label id, and a sample with
several labels stops it with `MultiLabelSampleError`: a single-label model cannot learn from it, and
keeping one of its labels would train on a wrong answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from vidtx.data.training_data import UNLABELED, relabel


class MultiLabelSampleError(RuntimeError):
    """A single-label loader read a sample with several labels (not a bad sample: the wrong task).
    Not among the errors of a sample that is logged and skipped (`vidtx.data.samples.SAMPLE_ERRORS`)."""


def sample_labels(meta: dict[str, Any]) -> list[int]:
    """The label ids of a sample (its split's): "labels" in a multi-label split, else ["label"]."""
    return [int(label) for label in meta["labels"]] if "labels" in meta else [int(meta["label"])]


def label_target(
    meta: dict[str, Any], labels: Sequence[int], num_classes: int, multi_label: bool, where: str
) -> int | torch.Tensor:
    """The sample's target in the label set that `labels` maps its split's ids into (`num_classes`
    K classes): the label id, or with `multi_label` a float32 (K,) multi-hot vector (all zeros for an
    unlabeled sample). `where` names the split and the sample in the error of a sample with several
    labels read without `multi_label`."""
    ids = [relabel(labels, label) for label in sample_labels(meta)]
    if multi_label:
        target = torch.zeros(num_classes, dtype=torch.float32)  # (K,)
        target[[label for label in ids if label != UNLABELED]] = 1.0
        return target
    if len(ids) != 1:
        names = ", ".join(map(str, meta.get("label_names", ids)))
        raise MultiLabelSampleError(
            f"{where} has {len(ids)} labels ({names}), and the model predicts one class per video: "
            "set model.task=multi_label to train and evaluate on label sets"
        )
    return ids[0]


def stacked_labels(targets: Sequence[int | torch.Tensor]) -> torch.Tensor:
    """A batch's targets (`label_target`'s) as one tensor: int64 ids (B,), or float32 multi-hot (B, K)."""
    if isinstance(targets[0], torch.Tensor):
        return torch.stack(list(targets))  # type: ignore[arg-type]
    return torch.tensor(targets, dtype=torch.int64)
