"""Issue 60 point 1: mAP computed by vidtx against scikit-learn's `average_precision_score`.

The same predictions go to both: 2,000 videos x 157 classes (Charades-sized), seeded, with a long
tail (class prevalence from 8% down to 0.25%, about 3.5 labels per video) and scores that depend on
the labels (sigmoid(2 * label + noise), float32). Two cases: those scores as they are (few ties), and
rounded to two decimals (a model's output as it is often stored: most scores tie). vidtx's
`vidtx.eval.multilabel.average_precision` (one sort over all classes, in torch) against
scikit-learn's `average_precision_score(targets, scores, average=None)` (a loop over the classes)
on the classes with a positive, and the macro mAP of each (`mean_average_precision`; scikit-learn's
`average="macro"`). Reported: the largest per-class difference, the mAP difference, and the time
of each, interleaved and compared per round (`benchmarks.timing`) on one thread.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import numpy as np
import torch
from sklearn.metrics import average_precision_score

from benchmarks.results import BenchmarkResult, Table, fmt
from benchmarks.timing import round_ratios, time_interleaved, torch_threads
from vidtx.eval.multilabel import average_precision, mean_average_precision

log = logging.getLogger(__name__)

VIDEOS, CLASSES, SEED = 2000, 157, 0
QUICK_VIDEOS = 300


def predictions(videos: int, tied: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded scores (N, K) float32 and multi-hot targets (N, K) with a long tail of class prevalence."""
    generator = torch.Generator().manual_seed(SEED)
    prevalence = torch.logspace(np.log10(0.08), np.log10(0.0025), CLASSES)  # (K,)
    targets = (torch.rand(videos, CLASSES, generator=generator) < prevalence).float()  # (N, K)
    noise = torch.randn(videos, CLASSES, generator=generator) * 1.5
    scores = torch.sigmoid(2.0 * targets - 2.0 + noise)  # (N, K) float32
    return (scores * 100).round() / 100 if tied else scores, targets


def sklearn_per_class(scores: np.ndarray, targets: np.ndarray) -> np.ndarray:
    return average_precision_score(targets, scores, average=None)


def measure(videos: int, tied: bool, repeats: int) -> dict:
    scores, targets = predictions(videos, tied)
    present = targets.any(dim=0)  # scikit-learn gives a class without a positive AP 0 and a warning
    scores_np, targets_np = scores[:, present].numpy(), targets[:, present].numpy()
    ours = average_precision(scores, targets)[present].numpy()
    theirs = sklearn_per_class(scores_np, targets_np)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no class without a positive reaches scikit-learn
        theirs_map = average_precision_score(targets_np, scores_np, average="macro")
    ours_map = mean_average_precision(scores, targets)
    seconds = time_interleaved(
        {
            "vidtx": lambda: average_precision(scores, targets),
            "scikit-learn": lambda: sklearn_per_class(scores_np, targets_np),
        },
        warmup=1,
        repeats=repeats,
    )
    distinct = sum(len(torch.unique(scores[:, k])) for k in range(CLASSES)) / (videos * CLASSES)
    return {
        "videos": videos,
        "classes_with_positives": int(present.sum()),
        "labels_per_video": targets.sum(dim=1).mean().item(),
        "distinct_scores_share": distinct,
        "map_vidtx": ours_map,
        "map_sklearn": float(theirs_map),
        "map_abs_diff": abs(ours_map - float(theirs_map)),
        "max_per_class_abs_diff": float(np.abs(ours - theirs).max()),
        "seconds": seconds,
        "ratio": round_ratios(seconds["scikit-learn"], seconds["vidtx"]),
    }


def run(output_dir: Path, quick: bool = False) -> BenchmarkResult:
    videos = QUICK_VIDEOS if quick else VIDEOS
    repeats = 3 if quick else 9
    raw, rows = {}, []
    with torch_threads(1):
        for label, tied in (("scores as they are", False), ("rounded to 0.01 (ties)", True)):
            log.info("mAP, vidtx vs scikit-learn: %s", label)
            case = raw[label] = measure(videos, tied, repeats)
            rows.append(
                [
                    label,
                    f"{case['distinct_scores_share']:.1%}",
                    f"{case['map_vidtx']:.6f}",
                    f"{case['map_abs_diff']:.2g}",
                    f"{case['max_per_class_abs_diff']:.2g}",
                    fmt(case["seconds"]["vidtx"].median * 1000),
                    fmt(case["seconds"]["scikit-learn"].median * 1000),
                    f"{fmt(case['ratio'].median, 2)}x",
                ]
            )
    notes = [
        "vidtx's per-class AP and mAP equal scikit-learn's on the same predictions: "
        + "; ".join(
            f"{label}: mAP difference {case['map_abs_diff']:.2g}, largest per-class {case['max_per_class_abs_diff']:.2g}"
            for label, case in raw.items()
        )
        + " (float64 rounding; the tests hold it under 1e-12).",
        "scikit-learn's time over vidtx's, per round: "
        + "; ".join(f"{label}: {fmt(case['ratio'].median, 2)}x" for label, case in raw.items())
        + " (one thread; above 1x vidtx is faster).",
    ]
    return BenchmarkResult(
        name="multilabel_map",
        title="Multi-label mAP: vidtx vs scikit-learn's average_precision_score",
        summary=(__doc__ or "").strip(),
        inputs={"videos": videos, "classes": CLASSES, "seed": SEED, "repeats": repeats, "threads": 1},
        tables=[
            Table(
                f"{videos} videos x {CLASSES} classes, per-class AP of every class with a positive",
                [
                    "scores",
                    "distinct scores",
                    "mAP",
                    "mAP difference",
                    "largest class AP difference",
                    "vidtx (ms)",
                    "scikit-learn (ms)",
                    "scikit-learn / vidtx",
                ],
                rows,
            )
        ],
        raw=raw,
        notes=notes,
        quick=quick,
    )
