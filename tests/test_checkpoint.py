"""DeepSpeed checkpoints of every ZeRO stage consolidate into a plain fp32 state dict."""

from pathlib import Path

import pytest
import torch
from torch import nn

from vidtx.config import TrainConfig
from vidtx.train.checkpoint import TAG, consolidated_state_dict
from vidtx.train.deepspeed_config import build_deepspeed_config
from vidtx.train.optim import build_optimizer, build_scheduler

pytestmark = pytest.mark.slow


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cls_token = nn.Parameter(torch.randn(1, 6))
        self.body = nn.Sequential(nn.Linear(6, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x + self.cls_token)

    def no_weight_decay(self) -> set[str]:
        return {"cls_token"}


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_consolidated_state_dict_matches_engine(
    single_process_group: None, tmp_path: Path, stage: int, precision: str
) -> None:
    import deepspeed

    torch.manual_seed(0)
    model = Net()
    initial = model.body[0].weight.detach().clone()
    train = TrainConfig(num_workers=1, micro_batch_size=4, zero_stage=stage, precision=precision)
    optimizer = build_optimizer(model, train.optimizer.model_copy(update={"name": "adamw", "lr": 1e-2}))
    scheduler = build_scheduler(optimizer, train.schedule, train.max_steps)  # saved in the checkpoint too
    engine, *_ = deepspeed.initialize(
        model=model, optimizer=optimizer, lr_scheduler=scheduler, config=build_deepspeed_config(train)
    )
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    inputs = torch.randn(4, 6)
    for _ in range(3):
        engine.backward(engine(inputs.to(dtype)).float().square().mean())
        engine.step()
    engine.eval()
    with torch.no_grad():
        expected = engine(inputs.to(dtype)).float()
    engine.save_checkpoint(str(tmp_path), tag=TAG)

    fresh = Net()
    state = consolidated_state_dict(tmp_path, fresh)
    assert all(tensor.dtype == torch.float32 for tensor in state.values())
    fresh.load_state_dict(state)
    with torch.no_grad():
        # bf16 engines compute with weights rounded to bf16: round the fp32 master weights the same way
        actual = fresh.to(dtype)(inputs.to(dtype)).float()
    assert torch.allclose(actual, expected, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(state["body.0.weight"], initial)  # the trained weights, not the initial ones
