import itertools

import pytest
import torch
from torch import nn

from vidtx.config import ConfigError, ScheduleConfig, TrainConfig, load_config
from vidtx.train.deepspeed_config import build_deepspeed_config
from vidtx.train.optim import build_optimizer, build_scheduler, lr_factor, parameter_groups


class TinyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pos_embed = nn.Parameter(torch.zeros(1, 4, 8))
        self.proj = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def no_weight_decay(self) -> set[str]:
        return {"pos_embed"}


def test_weight_decay_skips_norms_biases_and_listed_embeddings() -> None:
    model = TinyNet()
    decay, no_decay = parameter_groups(model, weight_decay=0.05)
    assert decay["weight_decay"] == 0.05
    assert no_decay["weight_decay"] == 0.0
    assert [p.shape for p in decay["params"]] == [model.proj.weight.shape]
    assert {id(p) for p in no_decay["params"]} == {
        id(model.pos_embed),
        id(model.proj.bias),
        id(model.norm.weight),
        id(model.norm.bias),
    }


@pytest.mark.parametrize(("name", "cls"), [("sgd", torch.optim.SGD), ("adamw", torch.optim.AdamW)])
def test_build_optimizer(name: str, cls: type) -> None:
    cfg = TrainConfig().optimizer.model_copy(update={"name": name, "lr": 0.3})
    optimizer = build_optimizer(TinyNet(), cfg)
    assert isinstance(optimizer, cls)
    assert all(group["lr"] == 0.3 for group in optimizer.param_groups)
    if name == "sgd":
        assert optimizer.param_groups[0]["nesterov"] is True
        assert optimizer.param_groups[0]["momentum"] == 0.9


def test_warmup_then_cosine() -> None:
    cfg = ScheduleConfig(warmup_steps=10, warmup_start_factor=0.1, min_lr_ratio=0.1)
    assert lr_factor(0, cfg, 110) == pytest.approx(0.1)
    assert lr_factor(5, cfg, 110) == pytest.approx(0.55)
    assert lr_factor(10, cfg, 110) == pytest.approx(1.0)
    assert lr_factor(60, cfg, 110) == pytest.approx(0.55)  # half-way through the cosine
    assert lr_factor(110, cfg, 110) == pytest.approx(0.1)
    factors = [lr_factor(step, cfg, 110) for step in range(10, 111)]
    assert all(a >= b for a, b in itertools.pairwise(factors))


def test_scheduler_drives_optimizer_lr_and_round_trips_state() -> None:
    model = TinyNet()
    optimizer = build_optimizer(model, TrainConfig().optimizer.model_copy(update={"lr": 1.0}))
    cfg = ScheduleConfig(warmup_steps=4, warmup_start_factor=0.25)
    scheduler = build_scheduler(optimizer, cfg, max_steps=20)
    for _ in range(3):
        optimizer.step()
        scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(lr_factor(3, cfg, 20))
    fresh = build_scheduler(build_optimizer(model, TrainConfig().optimizer), cfg, max_steps=20)
    fresh.load_state_dict(scheduler.state_dict())
    assert fresh.last_epoch == 3


def test_deepspeed_config_follows_train_config() -> None:
    train = TrainConfig(
        num_workers=2,
        micro_batch_size=4,
        global_batch_size=32,
        precision="fp16",
        zero_stage=2,
        gradient_clipping=0.5,
    )
    config = build_deepspeed_config(train)
    assert config["train_micro_batch_size_per_gpu"] == 4
    assert config["gradient_accumulation_steps"] == 4
    assert config["train_batch_size"] == 32
    assert config["fp16"]["enabled"]
    assert not config["bf16"]["enabled"]
    assert config["fp16"]["loss_scale"] == 0  # dynamic
    assert config["zero_optimization"]["stage"] == 2
    assert config["gradient_clipping"] == 0.5
    assert "optimizer" not in config


def test_deepspeed_overrides_merge_but_cannot_contradict_typed_fields() -> None:
    train = TrainConfig(deepspeed={"zero_optimization": {"reduce_bucket_size": 1000}})
    config = build_deepspeed_config(train)
    assert config["zero_optimization"] == {"stage": 1, "reduce_bucket_size": 1000}
    with pytest.raises(ConfigError, match=r"train.deepspeed: .*bf16 -> train.precision"):
        load_config(None, ["train.deepspeed={bf16: {enabled: true}}"])
    with pytest.raises(ConfigError, match=r"zero_optimization.stage -> train.zero_stage"):
        load_config(None, ["train.deepspeed={zero_optimization: {stage: 3}}"])
