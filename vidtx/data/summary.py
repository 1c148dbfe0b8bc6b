"""What `vidtx inspect` shows: a text summary of a manifest and a contact sheet of decoded clips."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np
import webdataset as wds
from matplotlib.figure import Figure  # no pyplot: no global backend, no display needed

from vidtx import storage
from vidtx.clips.sampling import FrameSampler
from vidtx.data.samples import SAMPLE_ERRORS, open_sample, sample_name
from vidtx.data.tar_reader import tar_samples
from vidtx.data.web_loader import log_and_continue
from vidtx.locations import Location, location
from vidtx.manifest import (
    MANIFEST_SUFFIX,
    Manifest,
    damaged_shards,
    find_splits,
    load_manifest,
    reason_counts,
)
from vidtx.storage import join, name_of, parent_of

log = logging.getLogger(__name__)


def describe(manifest: Manifest) -> str:
    """Counts, classes and rejects of a split as aligned text lines."""
    total_bytes = sum(shard.bytes for shard in manifest.shards)
    lines = [
        f"split {manifest.split}: {manifest.num_samples} samples in {len(manifest.shards)} shards "
        f"({total_bytes / 1e6:.1f} MB), {manifest.num_classes} classes"
        f"{' (multi-label: videos counted under each of their labels)' if manifest.multi_label else ''}, "
        f"{len(manifest.rejects)} rejected",
        f"content hash {manifest.content_hash}",
    ]
    width = max((len(name) for name in manifest.class_names), default=0)
    lines += [
        f"  {index:>4}  {name:<{width}}  {manifest.counts_per_class.get(name, 0):>7}"
        for index, name in enumerate(manifest.class_names)
    ]
    lines += [f"  rejected: {count} x {reason}" for reason, count in reason_counts(manifest.rejects)]
    return "\n".join(lines)


def _sheet_rows(
    manifest: Manifest, num_frames: int, short_side: int
) -> Iterator[tuple[np.ndarray, dict[str, Any]]]:
    """(frames (T, H, W, 3), metadata) of the split's videos that can be read, in order."""
    shards = wds.SimpleShardList(manifest.shard_urls())
    sampler = FrameSampler("segment", num_frames)
    for sample in wds.DataPipeline(shards, partial(tar_samples, handler=log_and_continue)):
        try:
            video, meta = open_sample(sample, short_side, num_threads=1)
            yield video.frames(sampler.test(video.num_frames)[0].tolist()), meta
        except SAMPLE_ERRORS as err:
            log.warning("contact sheet: skipping %s: %s", sample_name(sample), err)


def contact_sheet(
    manifest: Manifest, output: Location, *, num_videos: int = 4, num_frames: int = 8, short_side: int = 128
) -> Location:
    """A PNG with one row per video (the first `num_videos` of the split) of `num_frames` frames
    spread over the whole video, titled with its label (or labels); returns the path written."""
    rows = list(itertools.islice(_sheet_rows(manifest, num_frames, short_side), num_videos))
    figure = Figure(figsize=(1.6 * num_frames, 1.8 * max(1, len(rows))))
    axes = figure.subplots(max(1, len(rows)), num_frames, squeeze=False)
    for axis in axes.flat:
        axis.axis("off")
    for row, (frames, meta) in enumerate(rows):
        names = " | ".join(map(str, meta.get("label_names", [meta["label_name"]])))
        axes[row, 0].set_title(f"{names} ({meta['key']})", loc="left", fontsize=8)
        for column, frame in enumerate(frames):
            axes[row, column].imshow(frame)
    figure.tight_layout()
    with storage.staged(output) as local:  # a bucket: uploaded once written
        figure.savefig(local, dpi=100)
    return output


def inspect_shards(
    shards: str | Location,
    splits: list[str] | None,
    echo: Callable[[str], object],
    *,
    videos: int = 4,
    frames: int = 8,
    output: str | Location | None = None,
) -> list[str]:
    """`vidtx inspect`: echo each split's summary and shard check, save its contact sheet (unless
    `videos` is 0); returns the damaged shards found. `shards` may be a manifest file, for its split;
    either may be in a bucket."""
    shards, output = location(shards), location(output) if output else None
    storage.check(shards)
    if storage.is_file(shards):
        shards, splits = parent_of(shards), [name_of(shards).removesuffix(MANIFEST_SUFFIX)]
    splits = splits or find_splits(shards)
    if not splits:
        raise FileNotFoundError(f"{shards}: no <split>{MANIFEST_SUFFIX} found")
    damaged = []
    for split in splits:
        manifest = load_manifest(shards, split)
        echo(describe(manifest))
        problems = damaged_shards(manifest)
        echo("\n".join(f"  damaged: {problem}" for problem in problems) or "  shards intact")
        damaged += problems
        if videos > 0:
            sheet = join(output or shards, f"{split}.contact.png")
            echo(f"contact sheet: {contact_sheet(manifest, sheet, num_videos=videos, num_frames=frames)}")
    return damaged
