"""Checkpoints: every rank saves its DeepSpeed shard, all ranks report it to Ray Train together.

Ray Train merges the ranks' files into one checkpoint directory under `<storage>/<run name>/`, keeps
the best ones by validation top-1 plus always the latest, and hands the latest back through
`ray.train.get_checkpoint()` after a restart. `consolidated_state_dict` turns any of them into a plain
fp32 state dict (DeepSpeed's own ZeRO consolidation for stages 1-3).
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import ray.train
import torch
from torch import nn

from vidtx.train.accelerator import import_deepspeed
from vidtx.train.optim import parameter_groups

TAG = "state"  # DeepSpeed tag inside every checkpoint directory ("latest" would clash with its index file)
MODEL_STATES = "mp_rank_00_model_states.pt"


@dataclasses.dataclass
class TrainState:
    """What the loop needs besides model/optimizer/scheduler to continue where it stopped."""

    step: int = 0  # optimizer steps completed
    epoch: int = 0  # data epochs started (a resumed run draws a fresh, seeded stream)
    samples_seen: int = 0  # clips over all ranks
    best_top1: float = -1.0


def save_and_report(engine: Any, state: TrainState, metrics: dict[str, float]) -> None:
    """Collective: every rank writes its shard, then every rank reports (Ray merges the directories)."""
    with tempfile.TemporaryDirectory(prefix="vidtx-ckpt-") as directory:
        engine.save_checkpoint(directory, tag=TAG, client_state={"train_state": dataclasses.asdict(state)})
        ray.train.report(
            metrics,
            checkpoint=ray.train.Checkpoint.from_directory(directory),
            checkpoint_dir_name=f"checkpoint-{state.step:08d}",
        )


def restore(engine: Any) -> TrainState | None:
    """Load the latest reported checkpoint into the engine (model, optimizer, scheduler), if any."""
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as directory:
        path, client_state = engine.load_checkpoint(directory, tag=TAG)
    if path is None:
        raise RuntimeError(f"DeepSpeed could not load the checkpoint in {checkpoint.path}")
    return TrainState(**client_state["train_state"])


def consolidated_state_dict(checkpoint_dir: str | Path, model: nn.Module) -> dict[str, torch.Tensor]:
    """fp32 weights of `model`'s architecture from a checkpoint directory of any ZeRO stage.

    Stages 1-3 go through DeepSpeed's consolidation. Stage 0 keeps full weights in the model states
    file; in bf16 those are bf16, and the fp32 master copies sit in the optimizer state, in the order of
    `parameter_groups(model)`.
    """
    checkpoint_dir = Path(checkpoint_dir)
    if list((checkpoint_dir / TAG).glob("*_optim_states.pt")):
        import_deepspeed()
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

        return get_fp32_state_dict_from_zero_checkpoint(str(checkpoint_dir), tag=TAG)
    states = torch.load(checkpoint_dir / TAG / MODEL_STATES, map_location="cpu", weights_only=True)
    weights = {name: tensor.float() for name, tensor in states["module"].items()}
    master = (states.get("optimizer") or {}).get("fp32_groups")
    if master is not None:
        names = {id(param): name for name, param in model.named_parameters()}
        groups = parameter_groups(model, weight_decay=0.0)
        for group, fp32_params in zip(groups, master, strict=True):
            for param, fp32 in zip(group["params"], fp32_params, strict=True):
                weights[names[id(param)]] = fp32.float()
    return weights
