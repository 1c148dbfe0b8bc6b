"""Long videos, window by window: the windows of `predict.window` seconds every `predict.hop` seconds
that cover a video, each scored by its own test views (`vidtx.clips.views.test_views` over its
frames), so that only the frames of one window's views are decoded at a time, whatever the length; a
video file is read as decoding asks, never held whole (`vidtx.media.decode`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    """Frames [first, last) of a video: seconds [start, end)."""

    index: int
    first: int
    last: int
    start: float
    end: float


def plan_windows(num_frames: int, fps: float, length: float, hop: float) -> tuple[list[Window], str | None]:
    """Windows of `length` seconds every `hop` seconds from the video's start; the last one is moved
    back to end with the video, so that its tail is covered by a whole window. A video no longer than
    `length` is one window, and the note says so."""
    fps = fps or 1.0  # a container without a rate: frames stand for seconds
    duration = num_frames / fps
    span = max(1, round(length * fps))
    if span >= num_frames:
        note = f"predict.window {length:g} s covers the whole video ({duration:.2f} s): one window"
        return [Window(0, 0, num_frames, 0.0, duration)], note
    step = max(1, round(hop * fps))
    firsts = list(range(0, num_frames - span + 1, step))
    if firsts[-1] + span < num_frames:
        firsts.append(num_frames - span)
    windows = [
        Window(i, first, first + span, first / fps, (first + span) / fps) for i, first in enumerate(firsts)
    ]
    return windows, None
