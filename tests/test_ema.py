"""The weight average (`train.ema`, issue 45 item 4): updated every step, saved with a checkpoint and
resumed exactly, swapped in for validation, and chosen by `eval.weights` for what is evaluated and
registered. The engines are real DeepSpeed engines in the test's own process (one rank over gloo)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from vidtx.config import ConfigError, TrainConfig, load_config
from vidtx.models import create_model
from vidtx.train.checkpoint import CLASS_NAMES, TAG, consolidated_state_dict, trained_model
from vidtx.train.ema import EMA_FILE, WeightAverage
from vidtx.train.engine import build_engine


def test_the_average_follows_its_recurrence_and_leaves_frozen_weights_out() -> None:
    model = torch.nn.Linear(3, 2)
    model.bias.requires_grad_(False)
    ema = WeightAverage(model, decay=0.9)
    assert set(ema.shadow) == {"weight"}
    start = model.weight.detach().clone()
    expected = start.clone()
    for step in range(1, 4):
        with torch.no_grad():
            model.weight.add_(1.0)
        ema.update()
        expected = 0.9 * expected + 0.1 * (start + step)
        assert torch.allclose(ema.shadow["weight"], expected, atol=1e-6)


def test_swapped_in_puts_the_average_in_and_the_raw_weights_back_bit_for_bit() -> None:
    model = torch.nn.Linear(3, 2)
    ema = WeightAverage(model, decay=0.5)
    with torch.no_grad():
        model.weight.mul_(3.0)
    raw = model.weight.detach().clone()
    ema.update()
    with ema.swapped_in():
        assert torch.equal(model.weight, ema.shadow["weight"])
    assert torch.equal(model.weight, raw)


def test_zero_3_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="ema") as refused:
        TrainConfig(zero_stage=3, ema=0.999)
    assert "ZeRO-3" in str(refused.value)
    assert TrainConfig(zero_stage=2, ema=0.999).ema == 0.999


def steps(engine, ema: WeightAverage, first: int, last: int) -> None:
    """Optimizer steps `first`..`last - 1`, each on its own seeded batch, then the average's update."""
    model = engine.module
    for step in range(first, last):
        generator = torch.Generator().manual_seed(step)
        clips = torch.randn(2, 3, model.num_frames, model.img_size, model.img_size, generator=generator)
        dtype = next(model.parameters()).dtype  # bf16 engines take bf16 clips
        loss = torch.nn.functional.cross_entropy(engine(clips.to(dtype)).float(), torch.tensor([0, 1]))
        engine.backward(loss)
        engine.step()
        ema.update()


@pytest.mark.slow
@pytest.mark.parametrize("zero_stage", [0, 1, 2])
def test_a_resumed_run_continues_the_average_exactly(
    zero_stage: int, tmp_path: Path, single_process_group: None
) -> None:
    train = TrainConfig(num_workers=1, micro_batch_size=2, zero_stage=zero_stage, precision="fp32", ema=0.9)
    torch.manual_seed(0)
    straight = build_engine(create_model("xvit_tiny"), train).engine
    ema = WeightAverage(straight.module, train.ema)
    steps(straight, ema, 0, 3)
    straight.save_checkpoint(str(tmp_path), tag=TAG)
    ema.save(tmp_path)
    steps(straight, ema, 3, 6)

    torch.manual_seed(1)  # other initial weights: everything must come from the checkpoint
    resumed = build_engine(create_model("xvit_tiny"), train).engine
    resumed_ema = WeightAverage(resumed.module, train.ema)
    resumed.load_checkpoint(str(tmp_path), tag=TAG)
    resumed_ema.load(tmp_path)
    steps(resumed, resumed_ema, 3, 6)
    assert resumed_ema.shadow.keys() == ema.shadow.keys()
    assert all(torch.equal(resumed_ema.shadow[name], ema.shadow[name]) for name in ema.shadow)
    assert not all(  # the average is not the weights
        torch.equal(ema.shadow[name], param.float()) for name, param in straight.module.named_parameters()
    )


@pytest.mark.slow
def test_eval_weights_chooses_the_average_or_the_raw_weights(
    tmp_path: Path, single_process_group: None
) -> None:
    config = load_config(
        None, ["model.name=xvit_tiny", "data.num_frames=4", "data.short_side=32", "data.crop_size=32"]
    )
    train = TrainConfig(num_workers=1, micro_batch_size=2, zero_stage=1, precision="bf16", ema=0.5)
    model = create_model("xvit_tiny", num_classes=2, num_frames=4, img_size=32)
    engine = build_engine(model, train).engine
    ema = WeightAverage(engine.module, train.ema)
    steps(engine, ema, 0, 2)
    engine.save_checkpoint(str(tmp_path), tag=TAG)
    Path(tmp_path, CLASS_NAMES).write_text(json.dumps(["a", "b"]))
    raw = consolidated_state_dict(
        tmp_path, create_model("xvit_tiny", num_classes=2, num_frames=4, img_size=32)
    )

    def weights(choice: str) -> dict[str, torch.Tensor]:
        chosen = config.model_copy(update={"eval": config.eval.model_copy(update={"weights": choice})})
        return trained_model(chosen, str(tmp_path)).module.state_dict()

    with pytest.raises(ConfigError, match=r"eval.weights: ema, but .* holds no weight average"):
        weights("ema")
    assert all(
        torch.equal(weights("auto")[name], tensor) for name, tensor in raw.items()
    )  # nothing to average
    ema.save(tmp_path)
    assert (tmp_path / EMA_FILE).is_file()
    for choice in ("ema", "auto"):
        assert all(torch.equal(weights(choice)[name], tensor) for name, tensor in ema.shadow.items())
    assert all(torch.equal(weights("raw")[name], tensor) for name, tensor in raw.items())
    assert not all(torch.equal(ema.shadow[name], raw[name]) for name in ema.shadow)
