"""`model.init_from` and `model.checkpoint` checked on the driver, before any Ray worker starts (one line
naming the setting), position tables fitted to another frame count or crop size, and a VideoMAE
checkpoint as downloaded (a Hugging Face folder) starting a fine-tune and a pretraining."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import VideoMAEForPreTraining
from videomae_folders import DECODER, videomae_pretraining_folder

from vidtx.config import ConfigError, PipelineConfig, load_config
from vidtx.model_factory import check_model_config, check_pretrain_config, masked_autoencoder, model_for
from vidtx.models import create_model, save_checkpoint
from vidtx.models.mae import decoder_state
from vidtx.train.checkpoint import TrainedModel, trained_model
from vidtx.train.starting_weights import check_starting_weights, start_decoder, start_from

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


VIDEOMAE = ["model.name=videomae_tiny", *DECODER]


def test_a_hugging_face_pretraining_folder_fine_tunes_by_videomaes_recipe_and_pretrains_on_with_its_decoder(
    tmp_path: Path,
) -> None:
    folder = videomae_pretraining_folder(tmp_path / "videomae-base")
    config = config_with(tmp_path, *VIDEOMAE, f"model.init_from={folder}")
    check_starting_weights(config, check_model_config(config))
    source = trained_model(config, str(folder))
    report = start_from(model_for(config, num_classes=3), source, ["a", "b", "c"], str(folder))
    assert sorted(report.initialised) == ["fc_norm.bias", "fc_norm.weight", "head.fc.bias", "head.fc.weight"]
    assert report.ignored == ["norm.bias", "norm.weight"]  # the pretraining encoder's final norm
    text = report.text()
    assert text.startswith(f"found {folder}: Hugging Face's VideoMAEForPreTraining, a ViT 96 wide, 4 blocks, "
                           "4 heads, 4x32, a final norm; a decoder 1 blocks 32 wide")  # fmt: skip
    assert (
        "VideoMAE's fine-tuning recipe, mean pooling into a new fc_norm: fc_norm.weight, fc_norm.bias, "
        "head.fc.weight, head.fc.bias start afresh; the source's norm.bias, norm.weight not used\n" in text
    )

    # A pretraining from it: its encoder with the final norm, the decoder of the checkpoint
    check_starting_weights(config, check_model_config(config), check_pretrain_config(config))
    autoencoder = masked_autoencoder(config)
    report = start_from(autoencoder.encoder, source, ["a"], str(folder))
    assert report.initialised == []  # every tensor, the final norm too
    assert start_decoder(autoencoder, source, str(folder)) == sorted(decoder_state(autoencoder.state_dict()))
    theirs = VideoMAEForPreTraining.from_pretrained(folder)
    assert torch.equal(autoencoder.encoder.norm.weight, theirs.videomae.layernorm.weight)
    assert torch.equal(autoencoder.decoder_pred.weight, theirs.decoder.head.weight)

    heads = config_with(tmp_path, *VIDEOMAE, "model.options={num_heads: 2}", f"model.init_from={folder}")
    with pytest.raises(
        ConfigError, match=r": it has 4 attention heads, this model 2 \(model.options.num_heads\?\) "
    ):
        check_starting_weights(heads, check_model_config(heads))
    heads = config_with(tmp_path, *VIDEOMAE, "pretrain.decoder_heads=4", f"model.init_from={folder}")
    with pytest.raises(
        ConfigError, match=r": its decoder has 2 attention heads, this one 4 \(pretrain.decoder_heads\?\)$"
    ):
        check_starting_weights(heads, check_model_config(heads), check_pretrain_config(heads))
    other = config_with(tmp_path, *VIDEOMAE, "pretrain.decoder_width=64", f"model.init_from={folder}")
    with pytest.raises(ConfigError, match=r"^model.init_from .*: its \S+ is \(.*32.*\), this decoder's \(.*64.*\) "
                                          r"\(pretrain.decoder_width, pretrain.decoder_heads\?\)$"):  # fmt: skip
        check_starting_weights(other, check_model_config(other), check_pretrain_config(other))
    (folder / "config.json").write_text(
        (folder / "config.json").read_text().replace('"num_hidden_layers": 4', '"num_hidden_layers": 5')
    )
    with pytest.raises(
        ConfigError,
        match=r"^model.init_from \S+: not a checkpoint vidtx can read \(.*no blocks\.4\.norm1\.weight",
    ):
        check_starting_weights(config, check_model_config(config))
