"""`model.init_from` and `model.checkpoint` checked on the driver, before any Ray worker starts (one line
naming the setting), and position tables fitted to another frame count or crop size."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vidtx.config import ConfigError, PipelineConfig, load_config
from vidtx.model_factory import check_model_config, model_for
from vidtx.models import create_model, save_checkpoint
from vidtx.train.checkpoint import TrainedModel
from vidtx.train.starting_weights import check_starting_weights, start_from

ROOT = Path(__file__).resolve().parent.parent
SIZES = ["data.num_frames=4", "data.crop_size=32", "model.name=xvit_tiny"]


def config_with(tmp_path: Path, *overrides: str) -> PipelineConfig:
    return load_config(None, [f"workdir={tmp_path}", *SIZES, *overrides])


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("models:/nothing@champion", r"model.init_from models:/nothing@champion: no MLflow registry at sqlite:///"),
        ("{tmp}/missing.pt", r"model.init_from .*/missing.pt: no such file or checkpoint"),
        ("{tmp}/text.pt", r"model.init_from .*/text.pt: not a checkpoint vidtx can read \(Weights only load failed\)"),
        ("{tmp}", r"model.init_from .*: not a checkpoint vidtx can read \(.*no DeepSpeed state/ in it"),
        ("{tmp}/vivit.pt", r"model.init_from .*/vivit.pt: the source has no .* \(another architecture\?\) \(model.name=xvit_tiny\)"),
        ("{tmp}/wide.pt", r"its cls_token is \(1, 1, 128\), this model's \(1, 1, 96\) \(another size\?\) \(model.name=xvit_tiny\)"),
    ],
)  # fmt: skip
def test_starting_weights_that_cannot_start_the_model_are_one_line(
    source: str, says: str, tmp_path: Path
) -> None:
    (tmp_path / "text.pt").write_text("not a checkpoint")
    vivit = create_model("vivit_fe_tiny", num_classes=3, num_frames=4, img_size=32)
    save_checkpoint(vivit, tmp_path / "vivit.pt")
    wide = create_model("xvit_tiny", num_classes=3, num_frames=4, img_size=32, embed_dim=128, num_heads=4)
    save_checkpoint(wide, tmp_path / "wide.pt")
    config = config_with(tmp_path, f"model.init_from={source.format(tmp=tmp_path)}")
    with pytest.raises(ConfigError, match=says):
        check_starting_weights(config, check_model_config(config))


def test_a_released_checkpoint_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    config = config_with(tmp_path, f"model.checkpoint={tmp_path / 'xvit.pth'}")
    with pytest.raises(ConfigError, match=rf"^model.checkpoint {tmp_path / 'xvit.pth'}: no such file$"):
        check_starting_weights(config, check_model_config(config))


def test_another_frame_count_and_crop_size_resize_the_position_tables(tmp_path: Path) -> None:
    source = create_model("xvit_tiny", num_classes=3, num_frames=4, img_size=32)  # 4x4 patches, 4 steps
    save_checkpoint(source, tmp_path / "source.pt")
    config = load_config(None, [f"workdir={tmp_path}", "data.num_frames=8", "data.crop_size=48", "model.name=xvit_tiny",
                                f"model.init_from={tmp_path / 'source.pt'}"])  # fmt: skip
    check_starting_weights(config, check_model_config(config))  # fits: no error
    model = model_for(config, num_classes=3)
    report = start_from(model, TrainedModel(source, None), ["a", "b", "c"], "source.pt")
    assert report.resized == ["pos_embed", "temporal_embed"]
    assert model.pos_embed.shape == (1, 1 + 36, 96)
    assert model.temporal_embed.shape == (1, 8, 1, 96)
    assert torch.equal(model.pos_embed[:, 0], source.pos_embed[:, 0])  # the class token's position kept
    steps = model.temporal_embed[0, :, 0]  # (8, D): the source's 4 steps, linearly in between
    assert torch.allclose(steps[0], source.temporal_embed[0, 0, 0])
    assert torch.allclose(steps[-1], source.temporal_embed[0, -1, 0])
    assert "resized (2):\n  pos_embed\n  temporal_embed" in report.text()


def test_vidtx_train_says_it_in_one_line_before_the_tracking_store_or_ray(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "vidtx", "train", str(ROOT / "configs/experiments/demo.yaml"),
         f"--set=workdir={tmp_path}", f"--set=model.init_from={tmp_path / 'missing.pt'}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: model.init_from {tmp_path / 'missing.pt'}: no such file or checkpoint"
    ]
    assert not (tmp_path / "mlflow.db").exists()
