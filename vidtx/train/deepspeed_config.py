"""The DeepSpeed config, generated from `TrainConfig` so that one schema stays the source of truth."""

from __future__ import annotations

from typing import Any

from vidtx.config import TrainConfig, deep_merge


def build_deepspeed_config(train: TrainConfig) -> dict[str, Any]:
    """DeepSpeed JSON config for a run with `train.num_workers` data-parallel ranks.

    The optimizer and LR schedule are torch objects handed to `deepspeed.initialize` (no "optimizer"
    section): that keeps SGD/AdamW param groups under our control and avoids JIT-building fused_adam.
    """
    zero: dict[str, Any] = {"stage": train.zero_stage}
    if train.zero_stage >= 2:
        zero |= {"contiguous_gradients": True, "overlap_comm": True}
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": train.micro_batch_size,
        "gradient_accumulation_steps": train.gradient_accumulation_steps,
        "train_batch_size": train.micro_batch_size * train.gradient_accumulation_steps * train.num_workers,
        "gradient_clipping": train.gradient_clipping,
        "zero_optimization": zero,
        "bf16": {"enabled": train.precision == "bf16"},
        "fp16": {
            "enabled": train.precision == "fp16",
            "loss_scale": 0,  # 0 = dynamic loss scaling
            "initial_scale_power": 16,
            "loss_scale_window": 1000,
            "hysteresis": 2,
            "min_loss_scale": 1,
        },
        # DeepSpeed only whitelists its own/Adam optimizers for ZeRO; torch SGD's state is elementwise, so
        # partitioning it is exact.
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10**9,  # vidtx logs its own metrics
        "wall_clock_breakdown": False,
    }
    return deep_merge(config, train.deepspeed)
