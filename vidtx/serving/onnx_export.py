"""The network as an ONNX graph, checked in onnxruntime against PyTorch before anyone relies on it.

`torch.onnx.export` (the `torch.export` path, TorchDynamo's graph) writes the network with a dynamic
batch axis: input `clips` float32 (B, 3, T, H, W), already normalised as the model's config says,
output `logits` (B, K). The check decodes `export.videos` example MP4s at the model's frames and crop
size through evaluation's own steps (`vidtx.clips.views`: decode, sample, crop, normalise), runs the
batch through both, and refuses the export when the largest absolute logit difference passes
`export.tolerance`; both paths compute in fp32, so the difference is the kernels' summation order
(about 1e-6 for the zoo's tiny models). Every zoo model exports; one that does not is refused in one
line naming why.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch import nn

from vidtx.clips.normalize import normalize_clips
from vidtx.clips.views import video_views
from vidtx.config import ConfigError, PipelineConfig
from vidtx.serving.packaging import example_video

INPUT, OUTPUT = "clips", "logits"


class ExportMismatchError(ValueError):
    """onnxruntime's logits differ from PyTorch's by more than `export.tolerance`."""


@dataclasses.dataclass(frozen=True)
class ExportResult:
    """Where the ONNX file is and how far its logits are from PyTorch's on the checked clips."""

    path: Path
    max_abs_diff: float  # over the checked clips' logits
    tolerance: float
    clips: int  # checked, as one batch (the export traced a batch of two)
    opset: int
    seconds: float  # export and check

    def summary(self) -> str:
        return (
            f"exported {self.path} (ONNX opset {self.opset}, dynamic batch): onnxruntime's logits on "
            f"{self.clips} decoded clips within {self.max_abs_diff:.2g} of PyTorch's "
            f"(export.tolerance {self.tolerance:g}), {self.seconds:.1f} s"
        )


def check_clips(config: PipelineConfig) -> torch.Tensor:
    """Normalised clips (N, 3, T, crop, crop): one centre view of each of `export.videos` example MP4s
    (noise, H.264), decoded and prepared as evaluation prepares a video."""
    data = config.data
    views = [video_views(example_video(config, seed), data, 1, 1) for seed in range(config.export.videos)]
    return normalize_clips(torch.cat(views), data.mean, data.std)  # (N, T, H, W, C) uint8 -> (N, C, T, H, W)


def export_onnx(module: nn.Module, config: PipelineConfig, path: Path) -> ExportResult:
    """Write `module` to `path` as ONNX and check it in onnxruntime (see the module docstring);
    ConfigError naming why when it cannot be exported, ExportMismatchError when its logits differ."""
    import onnxruntime  # the export's own dependency: loaded only here

    started = time.monotonic()
    export = config.export
    module = module.eval().float().cpu()
    clips = check_clips(config)
    path.parent.mkdir(parents=True, exist_ok=True)
    batch = torch.export.Dim("batch", min=1, max=1024)
    try:
        with warnings.catch_warnings(), _exporter_quiet():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                module,
                (clips[:1].expand(2, -1, -1, -1, -1),),  # traced at 2: torch.export fixes a batch of 1
                dynamo=True,
                input_names=[INPUT],
                output_names=[OUTPUT],
                dynamic_shapes=({0: batch},),
                opset_version=export.opset,
                optimize=export.optimize,
                verbose=False,
            )
    except Exception as err:  # torch.export and the ONNX translation raise many kinds; one line says why
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(f"model.name={config.model.name} cannot be exported to ONNX: {reason}") from None
    program.save(str(path))
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (exported,) = session.run([OUTPUT], {INPUT: clips.numpy()})  # (N, K)
    with torch.no_grad():
        eager = module(clips).numpy()  # (N, K)
    difference = float(np.abs(exported - eager).max())
    if difference > export.tolerance:
        raise ExportMismatchError(
            f"{path}: onnxruntime's logits differ from PyTorch's by {difference:.3g} on {len(clips)} decoded "
            f"clips, above export.tolerance {export.tolerance:g}"
        )
    return ExportResult(
        path, difference, export.tolerance, len(clips), export.opset, time.monotonic() - started
    )


@contextlib.contextmanager
def _exporter_quiet() -> Iterator[None]:
    """torch's ONNX exporter warns, once per op, that torchvision's ops (which vidtx never uses) have
    no translation because torchvision is not installed."""
    registration = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registration.level
    registration.setLevel(logging.ERROR)
    try:
        yield
    finally:
        registration.setLevel(level)
