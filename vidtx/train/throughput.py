"""Clips per second, model FLOPs utilisation, the share of time spent waiting for data, and ETA over
a window of training steps."""

from __future__ import annotations

import time


class ThroughputMeter:
    """Measures the rate between two `lap` calls.

    `train_flops_per_clip` is forward + backward (3x the forward FLOPs); MFU is the achieved FLOP/s per
    device over `peak_flops` (per device), the definition of the PaLM paper.
    """

    def __init__(self, world_size: int, train_flops_per_clip: float | None, peak_flops: float | None) -> None:
        self.world_size = world_size
        self.train_flops_per_clip = train_flops_per_clip
        self.peak_flops = peak_flops
        self._start = time.perf_counter()
        self._clips = 0
        self._waited = 0.0
        self.clips_per_second = 0.0

    def update(self, clips: int) -> None:
        self._clips += clips

    def waited(self, seconds: float) -> None:
        """Time this rank spent waiting for its next batch (the loader had none ready)."""
        self._waited += seconds

    def lap(self) -> dict[str, float]:
        """Rates since the previous lap (clips over all ranks) and `data_wait`, the fraction of this
        rank's wall time spent waiting for batches; resets the window."""
        now = time.perf_counter()
        elapsed = max(now - self._start, 1e-9)
        self.clips_per_second = self._clips / elapsed
        rates = {"clips_per_second": self.clips_per_second, "data_wait": min(self._waited / elapsed, 1.0)}
        self._start, self._clips, self._waited = now, 0, 0.0
        if self.train_flops_per_clip and self.peak_flops:
            per_device = self.clips_per_second / self.world_size
            rates["mfu"] = per_device * self.train_flops_per_clip / self.peak_flops
        return rates

    def eta_seconds(self, steps_left: int, clips_per_step: int) -> float:
        return steps_left * clips_per_step / self.clips_per_second if self.clips_per_second else float("inf")


def format_duration(seconds: float) -> str:
    if seconds == float("inf"):
        return "?"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"
