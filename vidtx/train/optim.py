"""Optimizer, parameter groups and learning-rate schedule (torch objects handed to DeepSpeed)."""

from __future__ import annotations

import math

import torch
from torch import nn

from vidtx.config import OptimizerConfig, ScheduleConfig


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: weight decay on weight matrices, none on norms, biases, embeddings and tokens.

    Norm weights and biases are the parameters with ndim <= 1; embeddings and tokens are the names the
    model lists in `no_weight_decay()` (timm's convention).
    """
    skip = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim <= 1 or name in skip else decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(model: nn.Module, cfg: OptimizerConfig) -> torch.optim.Optimizer:
    groups = parameter_groups(model, cfg.weight_decay)
    if cfg.name == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas)


def lr_factor(step: int, cfg: ScheduleConfig, max_steps: int) -> float:
    """Multiplier of the peak LR at optimizer step `step`: linear warm-up, then cosine decay."""
    if step < cfg.warmup_steps:
        return cfg.warmup_start_factor + (1.0 - cfg.warmup_start_factor) * step / cfg.warmup_steps
    decay_steps = max(1, max_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / decay_steps)
    return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


class WarmupCosine:
    """Picklable LR lambda. DeepSpeed saves the scheduler's state, this object's attributes included,
    in every checkpoint (for ZeRO-0 in the weights file): plain numbers, which `torch.load` with
    `weights_only=True` reads, where a ScheduleConfig made it refuse the file."""

    def __init__(self, cfg: ScheduleConfig, max_steps: int) -> None:
        self.schedule, self.max_steps = cfg.model_dump(), max_steps

    def __call__(self, step: int) -> float:
        return lr_factor(step, ScheduleConfig(**self.schedule), self.max_steps)


def build_scheduler(
    optimizer: torch.optim.Optimizer, cfg: ScheduleConfig, max_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, WarmupCosine(cfg, max_steps))
