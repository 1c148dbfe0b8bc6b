"""Top classes for video files: decode, the multi-view test protocol, combine views, softmax."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from vidtx import storage
from vidtx.config import DataConfig
from vidtx.data.loader import test_views
from vidtx.data.transforms import normalize_clips
from vidtx.locations import Location
from vidtx.media.decode import open_video, probe_video, scaled_size


@dataclasses.dataclass
class Prediction:
    video: str
    top: list[tuple[str, float]]  # (class name, probability), best first


@torch.no_grad()
def predict_videos(
    model: nn.Module,
    data: DataConfig,
    class_names: list[str],
    videos: list[Location],
    *,
    num_clips: int = 1,
    num_crops: int = 3,
    top_k: int = 5,
) -> list[Prediction]:
    """Mean softmax over the views of each video (the probabilities are what a user reads)."""
    weights = next(model.parameters())
    predictions = []
    for path in videos:
        payload = storage.read_bytes(path)  # a file here or an object in a bucket
        info = probe_video(payload)
        video = open_video(payload, size=scaled_size(info.width, info.height, data.crop_size))
        views = test_views(video, data, num_clips, num_crops).to(weights.device)  # uint8 (V, T, H, W, C)
        clips = normalize_clips(views, data.mean, data.std, weights.dtype)  # (V, C, T, H, W)
        probabilities = model(clips).float().softmax(dim=-1).mean(dim=0)  # (K,)
        best = probabilities.topk(min(top_k, len(class_names)))
        top = [(class_names[i], p) for p, i in zip(best.values.tolist(), best.indices.tolist(), strict=True)]
        predictions.append(Prediction(str(path), top))
    return predictions
