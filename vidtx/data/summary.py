"""What `vidtx inspect` shows: a text summary of a manifest and a contact sheet of decoded clips."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from pathlib import Path

import webdataset as wds
from matplotlib.figure import Figure  # no pyplot: no global backend, no display needed

from vidtx.data.loader import open_sample
from vidtx.data.manifest import Manifest
from vidtx.data.sampling import FrameSampler


def reject_reason_kind(reason: str) -> str:
    """The reason without its detail: 'not a video (Invalid data ...)' -> 'not a video'."""
    return re.split(r"[:(]", reason, maxsplit=1)[0].strip()


def describe(manifest: Manifest) -> str:
    """Counts, classes and rejects of a split as aligned text lines."""
    total_bytes = sum(shard.bytes for shard in manifest.shards)
    lines = [
        f"split {manifest.split}: {manifest.num_samples} samples in {len(manifest.shards)} shards "
        f"({total_bytes / 1e6:.1f} MB), {manifest.num_classes} classes, {len(manifest.rejects)} rejected",
        f"content hash {manifest.content_hash}",
    ]
    width = max((len(name) for name in manifest.class_names), default=0)
    lines += [
        f"  {index:>4}  {name:<{width}}  {manifest.counts_per_class.get(name, 0):>7}"
        for index, name in enumerate(manifest.class_names)
    ]
    reasons = Counter(reject_reason_kind(reject.reason) for reject in manifest.rejects)
    lines += [f"  rejected: {count} x {reason}" for reason, count in reasons.most_common()]
    return "\n".join(lines)


def contact_sheet(
    manifest: Manifest, output: Path, *, num_videos: int = 4, num_frames: int = 8, short_side: int = 128
) -> Path:
    """A PNG with one row per video (the first `num_videos` of the split) of `num_frames` frames
    spread over the whole video, titled with the label; returns the path written."""
    samples = wds.DataPipeline(wds.SimpleShardList(manifest.shard_urls()), wds.tarfile_to_samples())
    sampler = FrameSampler("segment", num_frames)
    rows = []
    for sample in itertools.islice(samples, num_videos):
        video, meta = open_sample(sample, short_side, num_threads=1)
        rows.append((video.frames(sampler.test(video.num_frames)[0].tolist()), meta))
    figure = Figure(figsize=(1.6 * num_frames, 1.8 * max(1, len(rows))))
    axes = figure.subplots(max(1, len(rows)), num_frames, squeeze=False)
    for axis in axes.flat:
        axis.axis("off")
    for row, (frames, meta) in enumerate(rows):
        axes[row, 0].set_title(f"{meta['label_name']} ({meta['key']})", loc="left", fontsize=8)
        for column, frame in enumerate(frames):
            axes[row, column].imshow(frame)
    figure.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(output, dpi=100)
    return output
