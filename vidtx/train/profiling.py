"""A torch profiler trace of chosen training steps (`train.profile_steps: [first, last]`), on rank 0.

The trace covers whole optimizer steps, the wait for each batch included, so it shows where a step's
time goes (data, forward, backward, DeepSpeed's step and communication). It is written as a Chrome /
Perfetto trace (`trace.json.gz`, opened in https://ui.perfetto.dev or chrome://tracing) with the top
operators by self time beside it (`operators.txt`), both artifacts of the run's MLflow run under
`profile/`.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

logger = logging.getLogger(__name__)

TOP_OPERATORS = 30


class StepProfiler:
    """Profiles optimizer steps `first`..`last` (1-based, inclusive) when `enabled` (rank 0), and hands
    the folder of its files to `publish` (which logs them) after the last."""

    def __init__(self, steps: tuple[int, int] | None, enabled: bool, publish: Callable[[Path], None]) -> None:
        self.first, self.last = steps or (0, -1)
        self.enabled = enabled and steps is not None
        self.publish = publish
        self._profile: profile | None = None

    def step_starts(self, step: int) -> None:
        """Before optimizer step `step` (its first batch included)."""
        if self.enabled and step == self.first and self._profile is None:
            activities = [ProfilerActivity.CPU] + (
                [ProfilerActivity.CUDA] if torch.cuda.is_available() else []
            )
            self._profile = profile(activities=activities, record_shapes=True, with_stack=False)
            self._profile.start()

    def step_ends(self, step: int) -> None:
        """After optimizer step `step`: at the last profiled step, the trace and the operator table."""
        if self._profile is None or step != self.last:
            return
        self._profile.stop()
        with tempfile.TemporaryDirectory(prefix="vidtx-profile-") as folder:
            self._profile.export_chrome_trace(str(Path(folder, "trace.json.gz")))
            table = self._profile.key_averages().table(sort_by="self_cpu_time_total", row_limit=TOP_OPERATORS)
            Path(folder, "operators.txt").write_text(f"steps {self.first}-{self.last}\n{table}\n")
            self.publish(Path(folder))
        logger.info("profiled steps %d-%d: trace and operator table logged", self.first, self.last)
        self._profile = None
