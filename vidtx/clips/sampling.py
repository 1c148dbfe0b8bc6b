"""Which frames of a video make a clip.

Two schemes, as in the X-ViT paper's recipes:

* segment (SSv2, TSN style): the video is cut into T equal segments and one frame is taken from
  each, at a random offset in training and at the centre at test time. A clip always spans the whole
  video, which is what motion classes need.
* dense (Kinetics style): T frames `stride` apart in a window at a random start in training, at
  evenly spaced starts at test time.

Test-time views (`num_clips` > 1) shift the offset inside every segment, or the window start, evenly.
Videos shorter than the clip are padded by repeating frames (segment: some segments share a frame;
dense: the last frame repeats), so every clip has exactly T frames.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vidtx.config import SamplingMode


@dataclass(frozen=True)
class FrameSampler:
    mode: SamplingMode
    num_frames: int
    stride: int = 1

    def train(self, video_frames: int, rng: np.random.Generator) -> np.ndarray:
        """Frame indices of one random training clip, int64 of shape (T,)."""
        if self.mode == "segment":
            return self._segment(video_frames, rng.random(self.num_frames))
        last_start = max(0, video_frames - self._span)
        return self._dense(video_frames, int(rng.integers(0, last_start + 1)))

    def test(self, video_frames: int, num_clips: int = 1) -> np.ndarray:
        """Frame indices of `num_clips` evenly spread test clips, int64 of shape (num_clips, T)."""
        fractions = (np.arange(num_clips) + 0.5) / num_clips
        if self.mode == "segment":
            clips = [self._segment(video_frames, np.full(self.num_frames, f)) for f in fractions]
        else:
            last_start = max(0, video_frames - self._span)
            clips = [self._dense(video_frames, int(f * last_start + 0.5)) for f in fractions]
        return np.stack(clips)

    @property
    def _span(self) -> int:
        return (self.num_frames - 1) * self.stride + 1

    def _segment(self, video_frames: int, offsets: np.ndarray) -> np.ndarray:
        """One frame per segment, at `offsets` (fractions in [0, 1)) of each segment's length."""
        edges = np.linspace(0, video_frames, self.num_frames + 1)
        positions = edges[:-1] + offsets * np.diff(edges)
        return np.clip(positions.astype(np.int64), 0, video_frames - 1)

    def _dense(self, video_frames: int, start: int) -> np.ndarray:
        indices = start + np.arange(self.num_frames, dtype=np.int64) * self.stride
        return np.minimum(indices, video_frames - 1)
