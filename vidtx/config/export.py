"""`export`: the trained network as an ONNX graph that runs outside Python (`vidtx export`)."""

from __future__ import annotations

from pydantic import Field

from vidtx.config.base import StrictModel


class ExportConfig(StrictModel):
    """`export`: `vidtx export` (and the register stage with `registry.export_onnx`) writes the network as ONNX
    through `torch.export` (a dynamic batch axis), then runs it in onnxruntime on real decoded clips
    beside the PyTorch model: an export whose logits differ by more than `tolerance` is refused."""

    output: str | None = Field(
        None,
        description="Where to write the .onnx file (None: WORKDIR/export/MODEL.onnx, a registered model NAME-vVERSION.onnx).",
    )
    opset: int = Field(18, ge=18, description="ONNX opset (torch's exporter writes 18 and above).")
    optimize: bool = Field(
        False,
        description="Run onnxscript's graph optimizer on the export (fewer nodes; about 80 s for the tiny "
        "X-ViT on 2 CPU cores, against 15 s for the export itself).",
    )
    tolerance: float = Field(
        1e-4, ge=0.0, description="Largest absolute logit difference from PyTorch the export may have."
    )
    videos: int = Field(2, ge=1, le=16, description="Decoded example videos the check runs, as one batch.")
