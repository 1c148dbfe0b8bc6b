"""VideoMAE's released weights in vidtx (`vidtx.models.videomae`, `vidtx.models.videomae_weights`): Hugging
Face's own VideoMAE, built from a small random config (nothing downloaded), gives the same features and
logits as vidtx's model from the converted state dict; the official layout (a pretraining's encoder,
its decoder dropped) loads too."""

from __future__ import annotations

import pytest
import torch
from transformers import VideoMAEConfig, VideoMAEForVideoClassification

from vidtx.models import create_model
from vidtx.models.mae import MaskedAutoencoder
from vidtx.models.videomae_weights import from_hugging_face, from_official, videomae_model

SIZE = {"image_size": 32, "patch_size": 8, "num_frames": 4, "tubelet_size": 2}


@pytest.fixture(scope="module")
def hugging_face() -> VideoMAEForVideoClassification:
    torch.manual_seed(0)
    config = VideoMAEConfig(**SIZE, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=128, use_mean_pooling=True, num_labels=5)  # fmt: skip
    model = VideoMAEForVideoClassification(config).eval()
    with torch.no_grad():  # every tensor random, the biases and norms too (their init is 0 or 1)
        for param in model.parameters():
            param.normal_(0, 0.2)
    return model


def test_hugging_faces_videomae_converts_into_the_same_features_and_logits(
    hugging_face: VideoMAEForVideoClassification,
) -> None:
    model = videomae_model(
        from_hugging_face(hugging_face.state_dict()), num_frames=4, img_size=32, num_heads=4
    )
    clips = torch.randn(2, 3, 4, 32, 32)  # (B, C, T, H, W); Hugging Face takes (B, T, C, H, W)
    with torch.no_grad():
        theirs = hugging_face.videomae(clips.transpose(1, 2)).last_hidden_state  # (B, T'·N, D)
        mine = model.eval().forward_token_features(clips)
        assert (mine - theirs).abs().max() < 1e-4
        assert (model(clips) - hugging_face(clips.transpose(1, 2)).logits).abs().max() < 1e-4
    assert "pos_table" not in model.state_dict()  # fixed, as theirs: built for the model's own size


def test_an_official_pretraining_checkpoint_gives_its_encoder_and_drops_its_decoder() -> None:
    torch.manual_seed(1)
    encoder = create_model("videomae_tiny", num_classes=3, num_frames=4, img_size=32)
    pretraining = MaskedAutoencoder(encoder, decoder_dim=32, decoder_heads=2, decoder_depth=1, mask_ratio=0.5)
    official = {
        "model": {
            name: t for name, t in pretraining.state_dict().items() if not name.startswith("encoder.head")
        }
    }
    official["model"] |= {"encoder.norm.weight": torch.ones(96), "encoder.norm.bias": torch.zeros(96)}
    converted = from_official(official)
    assert not [name for name in converted if "decoder" in name or name == "mask_token"]
    model = videomae_model(
        converted, num_frames=8, img_size=32, num_heads=4
    )  # 8 frames: positions made for 8
    assert torch.equal(model.blocks[1].attn.v_bias, encoder.blocks[1].attn.v_bias)
    assert model.pos_table.shape == (1, 4 * 16, 96)
