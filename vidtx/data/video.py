"""One video of a shard sample, or of bytes a user sends: opened at the size a clip needs, its frames,
the multi-view test protocol. Training, evaluation and the served model share it; it imports no
webdataset (serving and `vidtx predict` never reach the training loader).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from vidtx.config import DataConfig
from vidtx.data.sampling import FrameSampler
from vidtx.data.transforms import EvalTransform
from vidtx.manifest import FRAMES_MEMBER, VIDEO_EXTENSIONS
from vidtx.media.decode import Video, VideoDecodeError, open_video, scaled_size
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
    return open_encoded(data, stored, short_side, num_threads), meta


def open_encoded(data: bytes, stored: tuple[int, int], short_side: int, num_threads: int) -> Video:
    """An encoded video of `stored` (width, height) decoded with its short side at `short_side`: how
    evaluation opens a shard's video member and the served model a video it is sent."""
    size = scaled_size(*stored, short_side)
    # decord scales while it decodes; at the stored size it needs no scaler at all
    return open_video(data, size=None if size == stored else size, num_threads=num_threads)


def frames_at(video: Video, indices: np.ndarray) -> np.ndarray:
    """Frames for an index array of any shape, decoding each distinct frame once: (*shape, H, W, 3)."""
    unique, inverse = np.unique(indices, return_inverse=True)
    frames = video.frames(unique.tolist())  # (distinct, H, W, 3)
    if len(unique) == indices.size and np.array_equal(unique, indices.ravel()):
        return frames.reshape(*indices.shape, *frames.shape[1:])  # sorted, no repeats: no copy
    return frames[inverse.reshape(indices.shape)]


def test_views(video: Video, cfg: DataConfig, num_clips: int, num_crops: int) -> torch.Tensor:
    """The multi-view test protocol for one video: uint8 views (clips * crops, T, crop, crop, C).

    `video` must be decoded with its short side at `cfg.crop_size`, so the crops cover the frame.
    """
    sampler = FrameSampler(cfg.sampling, cfg.num_frames, cfg.frame_stride)
    transform = EvalTransform(cfg.crop_size, num_crops)
    clips = frames_at(video, sampler.test(video.num_frames, num_clips))  # (clips, T, H, W, 3)
    return torch.cat([transform(frames) for frames in clips])
