"""Released X-ViT checkpoints: their tensor names and shapes (written down in tests/data), the
mapping to vidtx's names and back, and strict loading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from vidtx.config import ModelConfig
from vidtx.model_factory import build_model
from vidtx.models import create_model
from vidtx.models.weights import load_official_checkpoint, official_state_dict

RELEASED_K600 = json.loads((Path(__file__).parent / "data/xvit_released_k600_tensors.json").read_text())


def released_shapes() -> dict[str, tuple[int, ...]]:
    return {name: tuple(shape) for name, shape in RELEASED_K600["tensors"]}


def test_the_k600_preset_is_built_as_the_released_model() -> None:
    with torch.device("meta"):
        model = create_model("xvit_b16_16x224_k600")
    ours = {name: tuple(tensor.shape) for name, tensor in official_state_dict(model).items()}
    released = released_shapes()
    assert ours == {name: shape for name, shape in released.items() if not name.startswith("new_fc.")}


def test_a_released_checkpoint_fills_every_tensor(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(0)
    state = {name: torch.randn(shape, generator=generator) for name, shape in released_shapes().items()}
    path = tmp_path / "xvit_b16_16_k600.pyth"
    torch.save({"model_state": state, "cur_epoch": 30}, path)  # the SlowFast layout
    model = create_model("xvit_b16_16x224_k600")
    report = load_official_checkpoint(model, path)
    assert report.ignored == ["new_fc.weight", "new_fc.bias"]
    assert len(report.loaded) == len(state) - 2
    loaded = model.state_dict()
    torch.testing.assert_close(loaded["temporal_embed"], state["base_model.temp_embed"])
    torch.testing.assert_close(loaded["head.fc2.weight"], state["consensus.mlp_head.4.weight"])
    torch.testing.assert_close(
        loaded["head.blocks.0.attn.qkv.weight"], state["consensus.temporal_encoder.0.attn.qkv.weight"]
    )
    torch.testing.assert_close(loaded["blocks.11.mlp.fc2.bias"], state["base_model.blocks.11.mlp.fc2.bias"])


def tiny_released(**overrides: object) -> torch.nn.Module:
    """A tiny X-ViT built like the released models (official layout, 8 slots, 8-frame segments)."""
    options = {"num_frames": 16, "depth": 2, "official_compat": True, "shift_div": 8, "segment_frames": 8}
    return create_model("xvit_tiny", **options | overrides).eval()


def test_export_to_the_released_names_and_back_gives_the_same_model() -> None:
    torch.manual_seed(0)
    source, target = tiny_released(), tiny_released()
    clips = torch.randn(2, 3, 16, 56, 56)
    assert not torch.allclose(source(clips), target(clips))
    exported = official_state_dict(source)
    assert "base_model.temp_embed" in exported
    assert "consensus.mlp_head.0.weight" in exported  # the head's LayerNorm
    load_official_checkpoint(target, {"model_state": exported})
    torch.testing.assert_close(target(clips), source(clips))


def test_strict_loading_names_what_does_not_fit() -> None:
    model = tiny_released()
    state = official_state_dict(model)
    with pytest.raises(ValueError, match=r"unexpected tensors \['decoder.weight'\]"):
        load_official_checkpoint(model, state | {"decoder.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match=r"lacks \['head.fc2.bias'\]"):
        load_official_checkpoint(model, {k: v for k, v in state.items() if k != "consensus.mlp_head.4.bias"})
    other = official_state_dict(tiny_released(num_classes=7))
    with pytest.raises(
        ValueError, match=r"consensus.mlp_head.4.weight: checkpoint \(7, 96\), model \(10, 96\)"
    ):
        load_official_checkpoint(model, other)
    with pytest.raises(ValueError, match="no place for"):
        load_official_checkpoint(model, state | {"base_model.blocks.2.norm1.weight": torch.zeros(96)})


def test_a_config_checkpoint_loads_before_training_and_fine_tuning_resets_the_classifier(
    tmp_path: Path,
) -> None:
    source = tiny_released()
    path = tmp_path / "released.pyth"
    torch.save({"model_state": official_state_dict(source)}, path)
    options = {"official_compat": True, "shift_div": 8, "segment_frames": 8, "depth": 2}
    cfg = ModelConfig(name="xvit_tiny", checkpoint=str(path), options=options)
    same = build_model(cfg, num_classes=10, num_frames=16, img_size=56)
    torch.testing.assert_close(same.head.fc2.weight, source.head.fc2.weight)
    other = build_model(cfg, num_classes=4, num_frames=16, img_size=56)  # fine-tuning on 4 classes
    assert other.head.fc2.weight.shape == (4, 96)
    torch.testing.assert_close(other.head.fc1.weight, source.head.fc1.weight)
    torch.testing.assert_close(other.blocks[1].attn.qkv.weight, source.blocks[1].attn.qkv.weight)
