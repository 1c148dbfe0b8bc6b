"""Optimizer, parameter groups and learning-rate schedule (torch objects handed to DeepSpeed)."""

from __future__ import annotations

import math

import torch
from torch import nn

from vidtx.config import OptimizerConfig, ScheduleConfig

EMBEDDINGS = ("patch_embed.", "cls_token", "pos_embed", "temporal_embed")  # before the trunk's blocks


def layer_of(name: str, depth: int) -> int:
    """VideoMAE's layer id of a parameter: 0 for the embeddings (patches or tubelets, the class token,
    positions, X-ViT's temporal embedding), i + 1 for trunk block i, depth + 1 for what comes after
    the trunk (final norm, a temporal encoder, the head)."""
    if name.startswith("blocks."):
        return int(name.split(".")[1]) + 1
    return 0 if name.startswith(EMBEDDINGS) else depth + 1


def parameter_groups(model: nn.Module, weight_decay: float, layer_decay: float = 1.0) -> list[dict]:
    """The trainable parameters (frozen ones, `requires_grad` off, are left out) in named groups.

    Weight decay goes on weight matrices, none on norms, biases, embeddings and tokens (norm weights and
    biases are the parameters with ndim <= 1; embeddings and tokens the names the model lists in
    `no_weight_decay()`, timm's convention). With a `layer_decay` below 1, each layer (`layer_of`)
    gets its own pair of groups whose learning rate is scaled by layer_decay ** (depth + 1 - layer):
    the head keeps the full rate, the embeddings the smallest (VideoMAE's fine-tuning rule). Each group
    carries its `name` and `lr_scale`.
    """
    skip = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    depth = len(model.blocks) if hasattr(model, "blocks") else 0
    groups: dict[tuple[int, bool], dict] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        decays = not (param.ndim <= 1 or name in skip)
        layer = layer_of(name, depth) if layer_decay < 1.0 else depth + 1
        group = groups.setdefault((layer, decays), {
            "name": (f"layer_{layer:02d}_" if layer_decay < 1.0 else "") + ("decay" if decays else "no_decay"),
            "params": [],
            "weight_decay": weight_decay if decays else 0.0,
            "lr_scale": layer_decay ** (depth + 1 - layer),
        })  # fmt: skip
        group["params"].append(param)
    return [groups[key] for key in sorted(groups, key=lambda key: (key[0], not key[1]))]


def build_optimizer(model: nn.Module, cfg: OptimizerConfig) -> torch.optim.Optimizer:
    """The optimizer of the model's trainable parameters, each group at lr x its `lr_scale`."""
    groups = parameter_groups(model, cfg.weight_decay, cfg.layer_decay)
    for group in groups:
        group["lr"] = cfg.lr * group["lr_scale"]
    if cfg.name == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas)


def group_table(optimizer: torch.optim.Optimizer, model: nn.Module) -> str:
    """Each parameter group's name, learning rate (before the schedule's factor), weight decay,
    parameter count and first parameters: what a layer-decayed, partly frozen run trains."""
    names = {id(param): name for name, param in model.named_parameters()}
    rows = ["| group | lr | weight decay | parameters | tensors |", "|---|---|---|---|---|"]
    for group in optimizer.param_groups:
        params = group["params"]
        first = ", ".join(names.get(id(p), "?") for p in params[:3]) + (", ..." if len(params) > 3 else "")
        count = sum(p.numel() for p in params)
        rows.append(
            f"| {group.get('name', '')} | {group['lr']:.3g} | {group['weight_decay']:g} | {count} | {first} |"
        )
    frozen = [name for name, param in model.named_parameters() if not param.requires_grad]
    rows.append(
        f"| frozen | - | - | {len(frozen)} tensors | {', '.join(frozen[:3])}{', ...' if len(frozen) > 3 else ''} |"
    )
    return "\n".join(rows) + "\n"


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
