"""VideoMAE's checkpoints as people download them, read by vidtx (`vidtx.models.videomae_checkpoints`):
Hugging Face's own models, built from small random configs (nothing downloaded) and saved as
`save_pretrained` does or as lone files, and the official release's `.pth` layouts (written here from
the same weights under its names), give vidtx's encoder the same features and logits, and its masked
autoencoder the same reconstruction loss, as Hugging Face's model."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from transformers import VideoMAEConfig, VideoMAEForPreTraining, VideoMAEForVideoClassification, VideoMAEModel

from vidtx.models import load_checkpoint
from vidtx.models.masking import sample_mask
from vidtx.models.videomae_checkpoints import read_videomae
from vidtx.models.weights import read_checkpoint

# Unlike every guess: 2 heads of 32 (VideoMAE's are 64 wide), 4 frames at 32 px (its release: 16 at 224)
SIZES = {"image_size": 32, "patch_size": 8, "num_frames": 4, "tubelet_size": 2, "hidden_size": 64,
         "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128, "decoder_hidden_size": 32,
         "decoder_num_hidden_layers": 2, "decoder_num_attention_heads": 4, "decoder_intermediate_size": 128}  # fmt: skip
IMAGENET = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # what Hugging Face's pretraining un-normalises by
MODELS = {"VideoMAEModel": VideoMAEModel, "VideoMAEForPreTraining": VideoMAEForPreTraining,
          "VideoMAEForVideoClassification": VideoMAEForVideoClassification}  # fmt: skip


def hugging_face(kind: str, mean_pooling: bool, norm_pix_loss: bool = True, **sizes: object):
    """Hugging Face's `kind` at a small config, every tensor random (the norms' and biases' too)."""
    torch.manual_seed(0)
    config = VideoMAEConfig(**(SIZES | sizes), use_mean_pooling=mean_pooling, norm_pix_loss=norm_pix_loss,
                            num_labels=5, id2label={i: f"class {i}" for i in range(5)})  # fmt: skip
    model = MODELS[kind](config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0, 0.2)
    return model


def features(model, clips: torch.Tensor) -> torch.Tensor:
    """Hugging Face's encoder's last hidden state for clips (B, C, T, H, W) (it takes (B, T, C, H, W))."""
    encoder = model if isinstance(model, VideoMAEModel) else model.videomae
    return encoder(clips.transpose(1, 2)).last_hidden_state


@pytest.mark.parametrize("mean_pooling", [True, False])
@pytest.mark.parametrize("kind", list(MODELS))
def test_every_hugging_face_model_saved_as_a_folder_gives_the_same_features_and_logits(
    kind: str, mean_pooling: bool, tmp_path: Path
) -> None:
    theirs = hugging_face(kind, mean_pooling)
    theirs.save_pretrained(tmp_path / "folder")
    found = read_videomae(tmp_path / "folder")
    assert found.layout == f"Hugging Face's {kind}"
    assert found.sizes_from == "config.json"
    mine = found.encoder().eval()
    clips = torch.randn(2, 3, 4, 32, 32)  # (B, C, T, H, W)
    with torch.no_grad():
        assert (mine.forward_token_features(clips) - features(theirs, clips)).abs().max() < 1e-4
        if kind == "VideoMAEForVideoClassification":
            assert (mine(clips) - theirs(clips.transpose(1, 2)).logits).abs().max() < 1e-4
    assert found.options["final_norm"] is not mean_pooling  # a pretraining's encoder ends in its norm
    assert bool(found.decoder_options) is (kind == "VideoMAEForPreTraining")
    if kind == "VideoMAEForVideoClassification":
        assert found.class_names == [f"class {i}" for i in range(5)]
        assert "5 classes" in found.summary()


@pytest.mark.parametrize("form", ["model.safetensors", "pytorch_model.bin", "lone.safetensors", "lone.bin"])
def test_the_weight_files_read_alone_or_in_a_folder_and_without_config_json_sizes_come_from_the_tensors(
    form: str, tmp_path: Path
) -> None:
    """A lone file has no config.json: heads by VideoMAE's width (64 wide each), the release's 16
    frames at 224 px (positions are fixed, so the weights fit any)."""
    lone = form.startswith("lone")
    sizes = {"num_attention_heads": 1, "num_frames": 16, "image_size": 224, "patch_size": 32} if lone else {}
    theirs = hugging_face("VideoMAEForVideoClassification", True, **sizes)
    folder = tmp_path / "folder"
    theirs.save_pretrained(folder)  # config.json, model.safetensors
    state = {name: tensor.contiguous() for name, tensor in theirs.state_dict().items()}
    if form == "pytorch_model.bin":  # as transformers 4 wrote it, and many a hub repository holds it
        (folder / "model.safetensors").unlink()
        torch.save(state, folder / form)
    path = tmp_path / f"videomae{Path(form).suffix}" if lone else folder
    if lone:
        save_file(state, path) if path.suffix == ".safetensors" else torch.save(state, path)
    found = read_videomae(path)
    assert found.sizes_from == ("the tensors' shapes" if lone else "config.json")
    clips = torch.randn(1, 3, 16, 224, 224) if lone else torch.randn(2, 3, 4, 32, 32)
    with torch.no_grad():
        assert (found.encoder().eval()(clips) - theirs(clips.transpose(1, 2)).logits).abs().max() < 1e-4


def official_names(state: dict[str, torch.Tensor], pretraining: bool) -> dict[str, torch.Tensor]:
    """A Hugging Face state dict under the official release's names (its `modeling_pretrain.py` /
    `modeling_finetune.py`): timm's, a fused qkv with q_bias / v_bias, the encoder under `encoder.`
    in a pretraining."""
    renames = [(r"^videomae\.", ""), (r"embeddings\.patch_embeddings\.projection", "patch_embed.proj"),
               (r"^encoder\.layer\.", "blocks."), (r"^decoder\.decoder_layers\.", "decoder.blocks."),
               (r"attention\.output\.dense", "attn.proj"), (r"intermediate\.dense", "mlp.fc1"),
               (r"output\.dense", "mlp.fc2"), (r"layernorm_before", "norm1"), (r"layernorm_after", "norm2"),
               (r"^layernorm", "norm"), (r"^classifier", "head"), (r"attention\.attention\.query\.bias", "attn.q_bias"),
               (r"attention\.attention\.value\.bias", "attn.v_bias")]  # fmt: skip
    official: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        for pattern, replacement in renames:
            name = re.sub(pattern, replacement, name)
        if match := re.fullmatch(r"(.*)attention\.attention\.(query|key|value)\.weight", name):
            official.setdefault(f"{match[1]}attn.qkv.weight", []).append(tensor)  # query, key, value
            continue
        encoder_side = not name.startswith(("decoder.", "encoder_to_decoder", "mask_token"))
        official[f"encoder.{name}" if pretraining and encoder_side else name] = tensor
    return {name: torch.cat(t) if isinstance(t, list) else t for name, t in official.items()}


@pytest.mark.parametrize("kind", ["VideoMAEForPreTraining", "VideoMAEForVideoClassification"])
def test_the_official_releases_pth_pretrained_with_its_decoder_or_fine_tuned_gives_the_same_model(
    kind: str, tmp_path: Path
) -> None:
    sizes = {"num_attention_heads": 1, "decoder_num_attention_heads": 1, "num_frames": 16, "image_size": 224,
             "patch_size": 32, "decoder_hidden_size": 64, "decoder_intermediate_size": 256}  # fmt: skip
    pretraining = kind == "VideoMAEForPreTraining"
    theirs = hugging_face(kind, mean_pooling=not pretraining, **sizes)
    state = official_names(theirs.state_dict(), pretraining)
    file = tmp_path / "checkpoint.pth"
    torch.save({"model": state, "args": argparse.Namespace(model="pretrain_videomae")} if pretraining
               else {"module": state}, file)  # fmt: skip
    found = read_videomae(file)
    assert found.layout.startswith(f"the official VideoMAE {'pretraining' if pretraining else 'fine-tuned'}")
    clips = torch.randn(1, 3, 16, 224, 224)
    with torch.no_grad():
        assert (
            found.encoder().eval().forward_token_features(clips) - features(theirs, clips)
        ).abs().max() < 1e-4
        if pretraining:
            mask = sample_mask(1, 8, 49, 0.75, "tube", torch.Generator().manual_seed(0))
            mae = found.masked_autoencoder(pixel_mean=IMAGENET[0], pixel_std=IMAGENET[1]).eval()
            loss = theirs(clips.transpose(1, 2), bool_masked_pos=mask).loss
            assert abs(mae(clips, mask).loss - loss) < 1e-5


@pytest.mark.parametrize("mean_pooling", [True, False])
@pytest.mark.parametrize("norm_pix_loss", [True, False])
def test_the_reconstruction_loss_equals_hugging_faces_on_the_same_weights_clips_and_mask(
    norm_pix_loss: bool, mean_pooling: bool, tmp_path: Path
) -> None:
    theirs = hugging_face("VideoMAEForPreTraining", mean_pooling, norm_pix_loss)
    theirs.save_pretrained(tmp_path)
    found = read_videomae(tmp_path)
    mae = found.masked_autoencoder(pixel_mean=IMAGENET[0], pixel_std=IMAGENET[1]).eval()
    assert mae.norm_pix_loss is norm_pix_loss  # read from config.json
    mean, std = (torch.tensor(v)[:, None, None, None] for v in IMAGENET)
    clips = (torch.rand(3, 3, 4, 32, 32) - mean) / std  # (B, C, T, H, W) as the data normalises them
    mask = sample_mask(3, 2, 16, 0.75, "tube", torch.Generator().manual_seed(0))  # (B, T'·N), True: hidden
    with torch.no_grad():
        loss = theirs(clips.transpose(1, 2), bool_masked_pos=mask).loss
        assert abs(mae(clips, mask).loss - loss) < 1e-5


def test_a_wrong_or_partial_checkpoint_is_one_line_naming_the_first_tensor_that_does_not_fit(
    tmp_path: Path,
) -> None:
    theirs = hugging_face("VideoMAEForPreTraining", False)
    state = theirs.state_dict()
    partial = {name: t for name, t in state.items() if name != "videomae.encoder.layer.1.output.dense.weight"}
    torch.save(partial, tmp_path / "partial.bin")
    with pytest.raises(
        ValueError, match=r"partial\.bin: no blocks\.1\.mlp\.fc2\.weight \(a partial checkpoint\?\)$"
    ):
        read_videomae(tmp_path / "partial.bin").encoder()
    torch.save(state | {"videomae.pooler.dense.weight": torch.zeros(2)}, tmp_path / "other.bin")
    with pytest.raises(ValueError, match=r"^videomae\.pooler\.dense\.weight: not a tensor of Hugging Face's"):
        read_videomae(tmp_path / "other.bin")
    theirs.save_pretrained(tmp_path / "folder")
    config = tmp_path / "folder" / "config.json"
    config.write_text(config.read_text().replace('"num_hidden_layers": 2', '"num_hidden_layers": 3'))
    with pytest.raises(ValueError, match=r"no blocks\.2\.norm1\.weight"):
        read_videomae(tmp_path / "folder").encoder()
    config.write_text(config.read_text().replace('"model_type": "videomae"', '"model_type": "bert"'))
    with pytest.raises(ValueError, match=r"config\.json: model_type 'bert', not 'videomae'$"):
        read_videomae(tmp_path / "folder")


def test_vidtx_convert_writes_a_pt_of_the_same_model_and_says_how_to_train_from_it(tmp_path: Path) -> None:
    theirs = hugging_face("VideoMAEForPreTraining", False)
    theirs.save_pretrained(tmp_path / "videomae")
    command = [
        sys.executable,
        "-m",
        "vidtx",
        "convert",
        str(tmp_path / "videomae"),
        str(tmp_path / "videomae.pt"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    lines = done.stdout.splitlines()
    assert lines[0].startswith(
        f"found {tmp_path / 'videomae'}: Hugging Face's VideoMAEForPreTraining, a ViT 64 wide"
    )
    assert lines[1] == f"wrote {tmp_path / 'videomae.pt'}: its encoder and decoder"
    settings = """--set model.name=videomae_b16_16x224 --set 'model.options={"depth": 2, "embed_dim": 64, """
    settings += """"mlp_ratio": 2.0, "norm_eps": 1e-12, "num_heads": 2, "patch_size": 8}'"""
    assert lines[2] == f"fine-tune: {settings} --set model.init_from={tmp_path / 'videomae.pt'}"
    assert (
        lines[3]
        == f"continue its pretraining: vidtx pretrain CONFIG {settings} --set model.init_from={tmp_path / 'videomae.pt'}"
    )
    saved = read_checkpoint(tmp_path / "videomae.pt")
    clips = torch.randn(1, 3, 4, 32, 32)
    with torch.no_grad():
        mine = load_checkpoint(saved).eval().forward_token_features(clips)
        assert (mine - features(theirs, clips)).abs().max() < 1e-4
    assert saved.decoder.keys() == read_videomae(tmp_path / "videomae").weights.decoder.keys()

    command[4] = str(tmp_path / "missing")
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (1, f"error: {tmp_path / 'missing'}: no such file or folder\n")
