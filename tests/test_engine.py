"""The training worker's DeepSpeed engine (`vidtx.train.engine`) on every ZeRO stage and precision, on
real engines in the test's own process (one rank over gloo): what Ray Train adds nothing to. (These
ran as three Ray Train runs of ~30 s each in tests/test_train.py; reading the frames store, a bucket's
shards and checkpoints, and evaluating the consolidated weights are checked there, in the runs that
need Ray anyway.)"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from engines import trained_weights

from vidtx.config import TrainConfig
from vidtx.models import create_model

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_every_zero_stage_and_precision_trains_xvit(
    single_process_group: None, tmp_path: Path, stage: int, precision: str
) -> None:
    """Six steps on one batch of two clips: the loss falls from ln 2 (two labels), and the consolidated
    fp32 weights are a whole, changed state dict of the model."""
    train = TrainConfig(num_workers=1, micro_batch_size=2, zero_stage=stage, precision=precision, max_steps=6)
    train.optimizer = train.optimizer.model_copy(update={"name": "adamw", "lr": 1e-3})
    losses, weights = trained_weights("xvit_tiny", train, 6, tmp_path, same_batch=True)
    assert all(math.isfinite(loss) for loss in losses)
    assert losses[-1] < losses[0]
    torch.manual_seed(train.seed)  # the initial weights, as the engine's model was made
    start = create_model("xvit_tiny").state_dict()
    assert weights.keys() == start.keys()
    assert all(weight.dtype == torch.float32 for weight in weights.values())
    assert not torch.equal(weights["blocks.0.attn.qkv.weight"], start["blocks.0.attn.qkv.weight"])
