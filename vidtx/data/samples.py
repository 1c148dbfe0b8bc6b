"""One sample of a shard opened as a video at the size a clip needs (a video member through
`vidtx.clips.views.open_encoded`, or packed JPEG frames), and its name in logs."""

from __future__ import annotations

import json
from typing import Any

from vidtx.clips.views import open_encoded
from vidtx.manifest import FRAMES_MEMBER, VIDEO_EXTENSIONS
from vidtx.media.decode import Video, VideoDecodeError, scaled_size
from vidtx.media.frames import JpegFrames

SAMPLE_ERRORS = (VideoDecodeError, KeyError, ValueError)  # what a bad sample raises when opened


def sample_name(sample: dict[str, Any]) -> str:
    """`<tar>:<key>` and, when its metadata can be read, the source video: names a sample in logs."""
    name = f"{sample.get('__url__', '?')}:{sample.get('__key__', '?')}"
    try:
        return f"{name} ({json.loads(sample['json'])['source']})"
    except (KeyError, TypeError, ValueError):
        return name


def open_sample(
    sample: dict[str, Any], short_side: int, num_threads: int, *, at_least: bool = False
) -> tuple[Video, dict[str, Any]]:
    """The sample's video with its short side at `short_side` (with `at_least`, JPEG frames may keep
    the first DCT scale above it: a random crop is resized anyway), and its json metadata."""
    meta = json.loads(sample["json"])
    stored = (meta["width"], meta["height"])
    size = scaled_size(*stored, short_side)
    if FRAMES_MEMBER in sample:
        return JpegFrames(
            sample[FRAMES_MEMBER], meta["offsets"], meta["fps"], size=size, at_least=at_least
        ), meta
    data = next((sample[ext[1:]] for ext in VIDEO_EXTENSIONS if ext[1:] in sample), None)
    if data is None:
        raise VideoDecodeError(f"no video member among {sorted(k for k in sample if not k.startswith('_'))}")
    # a video with open groups of pictures (copied from its source: a re-encode closes them) is read
    # by segments, which decode a group's leading frames with the group before; decord's own random
    # access returns wrong frames there
    by_segments = meta.get("open_gop", False)
    return open_encoded(data, stored, short_side, num_threads, by_segments=by_segments), meta
