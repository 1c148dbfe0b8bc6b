"""`vidtx export`: the network as ONNX with a dynamic batch, checked in onnxruntime against PyTorch on
decoded clips; a registered version gets the file and the figure; what cannot be exported is one line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch
from mlflow import MlflowClient

from vidtx.config import PipelineConfig, load_config
from vidtx.models import create_model, load_checkpoint, save_checkpoint
from vidtx.serving.onnx_export import ExportMismatchError, check_clips
from vidtx.stages.export import export_trained
from vidtx.tracking.model_registry import load_registered_model


@pytest.fixture
def joint_tiny(tmp_path: Path) -> tuple[PipelineConfig, Path]:
    """An untrained joint space-time ViT (4 frames at 32 px, 3 classes) as a vidtx .pt file, and the
    config that exports it into `tmp_path`."""
    config = load_config(
        None,
        [
            "model.name=joint_tiny",
            "data.num_frames=4",
            "data.crop_size=32",
            "data.short_side=32",
            f"workdir={tmp_path}",
        ],
    )
    torch.manual_seed(0)
    model = create_model("joint_tiny", num_classes=3, num_frames=4, img_size=32)
    checkpoint = tmp_path / "joint.pt"
    save_checkpoint(model, checkpoint)
    return config, checkpoint


def test_an_export_runs_in_onnxruntime_at_any_batch_with_pytorch_s_logits(
    joint_tiny: tuple[PipelineConfig, Path],
) -> None:
    config, checkpoint = joint_tiny
    result = export_trained(config, str(checkpoint))
    assert result.path == config.workdir / "export" / "joint_tiny.onnx"
    assert 0 < result.max_abs_diff <= 1e-4  # fp32 both ways: the kernels' summation order only
    assert result.clips == 2
    session = onnxruntime.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["clips"]
    clips = check_clips(config.model_copy(update={"export": config.export.model_copy(update={"videos": 3})}))
    eager = load_checkpoint(checkpoint).eval()
    for batch in (clips[:1], clips):  # traced with two clips; one and three run as well
        (logits,) = session.run(["logits"], {"clips": batch.numpy()})
        with torch.no_grad():
            assert np.abs(logits - eager(batch).numpy()).max() <= 1e-4
    assert "within" in result.summary()


def test_an_export_whose_logits_differ_beyond_the_tolerance_is_refused(
    joint_tiny: tuple[PipelineConfig, Path],
) -> None:
    config, checkpoint = joint_tiny
    config.export.tolerance = 0.0  # no fp32 kernel pair agrees to the last bit on every logit
    with pytest.raises(ExportMismatchError, match=r"differ from PyTorch's by .* above export.tolerance 0"):
        export_trained(config, str(checkpoint))


def test_what_cannot_be_exported_is_one_line(vidtx, joint_tiny: tuple[PipelineConfig, Path]) -> None:
    config, _ = joint_tiny
    config_file = config.workdir / "export.yaml"
    config_file.write_text(f"workdir: {config.workdir}\nmodel: {{name: joint_tiny}}\n")
    not_a_checkpoint = config.workdir / "notes.pt"
    not_a_checkpoint.write_text("not a checkpoint")
    for given, reason in (
        (config.workdir / "nowhere.pt", "no such file or checkpoint"),
        (not_a_checkpoint, "not a checkpoint vidtx can read (Weights only load failed)"),
    ):
        refused = vidtx("export", str(config_file), "--checkpoint", str(given))
        assert refused.returncode == 2
        assert refused.stderr.strip().splitlines() == [f"error: --checkpoint {given}: {reason}"]
    assert not (config.workdir / "mlflow.db").exists()  # a file given: no tracking store asked


@pytest.mark.slow
def test_a_registered_version_gets_its_onnx_file_and_figure(
    registered_model: str, tiny_config: PipelineConfig, tmp_path: Path
) -> None:
    """The export of `models:/predict-test@champion` runs with the config it was registered with
    (4 frames at 32 px), and the version's run gets the file, the version the figure."""
    config = tiny_config.model_copy(deep=True)
    config.workdir = tmp_path
    config.tracking.tracking_uri = registered_model
    result = export_trained(config, "models:/predict-test@champion")
    assert result.path == tmp_path / "export" / "predict-test-v1.onnx"
    client = MlflowClient(registered_model)
    version = client.get_model_version("predict-test", "1")
    assert float(version.tags["vidtx.onnx.max_abs_diff"]) == pytest.approx(result.max_abs_diff, rel=1e-2)
    assert version.tags["vidtx.onnx.artifact"] == f"runs:/{version.run_id}/onnx/predict-test-v1.onnx"
    assert [a.path for a in client.list_artifacts(version.run_id, "onnx")] == ["onnx/predict-test-v1.onnx"]
    registered = load_registered_model("models:/predict-test/1", registered_model)
    session = onnxruntime.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].shape[1:] == [3, registered.config.data.num_frames, 32, 32]
    clips = torch.randn(3, 3, registered.config.data.num_frames, 32, 32)
    (logits,) = session.run(["logits"], {"clips": clips.numpy()})
    with torch.no_grad():
        assert np.abs(logits - registered.module(clips).numpy()).max() <= 1e-4
