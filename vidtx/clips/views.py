"""One encoded video to class scores (or an encoder's features) with evaluation's own steps: decoded at
the crop's short side, the multi-view test protocol (`test_views`), the one normalisation, the model.

`vidtx.eval.multiview` runs the same `test_views` and `view_logits` on a shard's videos and the served
model (`vidtx.serving`) on the videos it is sent, so the two agree for the same encoded video.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from vidtx.clips.crops import EvalTransform
from vidtx.clips.normalize import normalize_clips
from vidtx.clips.sampling import FrameSampler
from vidtx.config import DataConfig
from vidtx.media.decode import Video, VideoSource, open_video, scaled_size
from vidtx.media.probe import VideoInfo, probe_video
from vidtx.media.segments import open_segmented


def open_encoded(
    data: VideoSource,
    stored: tuple[int, int],
    short_side: int,
    num_threads: int,
    *,
    by_segments: bool = False,
    probed: VideoInfo | None = None,
) -> Video:
    """An encoded video (bytes, or a file or an object read as decoding asks) of `stored` (width,
    height) decoded with its short side at `short_side`: how evaluation opens a shard's video member
    and the served model a video it is sent or a file it is named. `by_segments` decodes a few groups
    of pictures at a time (`vidtx.media.segments`), so that a long video's length costs no memory,
    cut by the packets of `probed` where it was probed with them."""
    size = scaled_size(*stored, short_side)
    size = None if size == stored else size  # decord scales while it decodes; none at the stored size
    if by_segments:
        return open_segmented(data, size=size, num_threads=num_threads, probed=probed)
    return open_video(data, size=size, num_threads=num_threads)


def frames_at(video: Video, indices: np.ndarray) -> np.ndarray:
    """Frames for an index array of any shape, decoding each distinct frame once: (*shape, H, W, 3)."""
    unique, inverse = np.unique(indices, return_inverse=True)
    frames = video.frames(unique.tolist())  # (distinct, H, W, 3)
    if len(unique) == indices.size and np.array_equal(unique, indices.ravel()):
        return frames.reshape(*indices.shape, *frames.shape[1:])  # sorted, no repeats: no copy
    return frames[inverse.reshape(indices.shape)]


def test_views(
    video: Video, cfg: DataConfig, num_clips: int, num_crops: int, span: tuple[int, int]
) -> torch.Tensor:
    """The multi-view test protocol over frames [first, last) of `span` of a video (all of them, or
    a window of a long video): uint8 views (clips * crops, T, crop, crop, C). Only the frames the
    views use are decoded.

    `video` must be decoded with its short side at `cfg.crop_size`, so the crops cover the frame.
    """
    first, last = span
    sampler = FrameSampler(cfg.sampling, cfg.num_frames, cfg.frame_stride)
    transform = EvalTransform(cfg.crop_size, num_crops)
    clips = frames_at(video, first + sampler.test(last - first, num_clips))  # (clips, T, H, W, 3)
    return torch.cat([transform(frames) for frames in clips])


def open_payload(payload: VideoSource, data: DataConfig) -> Video:
    """An encoded video (bytes, a file or an object), checked readable and opened at the crop's short
    side, by segments cut by the probe's packets: one demux, and its length costs no memory."""
    info = probe_video(payload, packets=True)
    stored = (info.width, info.height)
    return open_encoded(payload, stored, data.crop_size, data.decode_threads, by_segments=True, probed=info)


def video_views(payload: VideoSource, data: DataConfig, num_clips: int, num_crops: int) -> torch.Tensor:
    """The test views of an encoded video: uint8 (num_clips * num_crops, T, crop, crop, C)."""
    video = open_payload(payload, data)
    return test_views(video, data, num_clips, num_crops, (0, video.num_frames))


@torch.no_grad()
def view_logits(model: nn.Module, data: DataConfig, views: torch.Tensor) -> torch.Tensor:
    """Float32 logits (N, K) of uint8 clips (N, T, H, W, C), normalised on the model's device."""
    weights = next(model.parameters())
    clips = normalize_clips(views.to(weights.device, non_blocking=True), data.mean, data.std, weights.dtype)
    return model(clips).float()  # clips (N, C, T, H, W) -> (N, K)


def view_logits_and_pre_logits(
    model: nn.Module, classifier: nn.Linear, data: DataConfig, views: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """`view_logits`, and what `classifier` (the model's last layer) was given: the pre-logits
    embeddings (N, D), float32, from the same forward pass."""
    given: list[torch.Tensor] = []
    hook = classifier.register_forward_pre_hook(lambda _, inputs: given.append(inputs[0]))
    try:
        logits = view_logits(model, data, views)
    finally:
        hook.remove()
    return logits, given[0].float()


@torch.no_grad()
def view_embeddings(model: nn.Module, data: DataConfig, views: torch.Tensor) -> torch.Tensor:
    """Float32 features (N, D) of uint8 clips (N, T, H, W, C): the network's final features before any
    head, averaged over what remains of time and space (an encoder's embedding of each view)."""
    weights = next(model.parameters())
    clips = normalize_clips(views.to(weights.device, non_blocking=True), data.mean, data.std, weights.dtype)
    features = model.forward_features(clips).float()  # (N, D), (N, T', D) or (N, T', S, D)
    return features.flatten(1, -2).mean(dim=1) if features.dim() > 2 else features
