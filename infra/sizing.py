"""GPU memory of X-ViT training per ZeRO stage, micro-batch and GPU count: the sizing table of
infra/README.md.

    python infra/sizing.py                      # the README's tables (X-ViT B/16, 8 and 16 frames)
    python infra/sizing.py --model xvit_b16_16x224 --gpu-memory 80 --gpus 8 16 --global-batch 256

Memory per GPU = model states + activations + a fixed reserve:

- Model states, accounted as in the ZeRO paper (arXiv:1910.02054, sec. 3 and 5) for bf16 training:
  bf16 weights (2 bytes per parameter), bf16 gradients (2), and fp32 master weights plus optimizer
  states (4 + 4 per state: SGD with momentum keeps one state, AdamW two). ZeRO-1 splits the fp32
  part over the GPUs, ZeRO-2 the gradients as well, ZeRO-3 the weights too.
- Activations are measured, not modelled: one training-mode forward pass of the real model runs on
  the CPU in bf16 under `torch.autograd.graph.saved_tensors_hooks`, which sees every tensor kept for
  the backward pass; the distinct storages that are not parameters are summed. The fused attention
  keeps no (S, S) matrix, so this grows linearly with the micro-batch. The backward pass holds the
  gradients of one block's activations on top (one depth-th more).
- The reserve covers the CUDA context, cuBLAS and NCCL workspaces and allocator fragmentation, and
  plans use at most 90% of a GPU: planning allowances, not measurements. Check a real run's peak
  (`torch.cuda.max_memory_allocated`) before you trust the last GiB.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Sequence

import torch

from vidtx.models import create_model
from vidtx.models.video import VideoTransformer

GIB = 2**30
USABLE_FRACTION = 0.9  # of a GPU's memory that a plan may fill, reserve included
OPTIMIZER_STATES = {"sgd": 1, "adamw": 2}  # fp32 tensors per parameter (momentum; first and second moment)


def activation_bytes_per_clip(model: VideoTransformer) -> int:
    """Bytes of the tensors a bf16 training forward pass of one clip keeps for its backward pass."""
    model = model.to(torch.bfloat16).train()
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}  # storage address -> bytes

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    clip = torch.randn(1, 3, model.num_frames, model.img_size, model.img_size, dtype=torch.bfloat16)
    with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
        model(clip)  # (1, num_classes); the graph and the saved tensors are dropped on return
    return sum(saved.values())


def model_state_bytes(num_params: int, zero_stage: int, world_size: int, optimizer: str = "sgd") -> float:
    """bf16 weights + bf16 gradients + fp32 master weights and optimizer states, per GPU."""
    fp32_states = (4 + 4 * OPTIMIZER_STATES[optimizer]) * num_params
    weights, gradients = 2 * num_params, 2 * num_params
    if zero_stage >= 1:
        fp32_states /= world_size
    if zero_stage >= 2:
        gradients /= world_size
    if zero_stage >= 3:
        weights /= world_size
    return weights + gradients + fp32_states


@dataclasses.dataclass(frozen=True)
class ModelFootprint:
    name: str
    num_params: int
    depth: int
    activation_bytes_per_clip: int

    @classmethod
    def measure(cls, model_name: str, num_classes: int = 174, drop_path_rate: float = 0.1) -> ModelFootprint:
        """The preset as the SSv2 recipes train it (174 classes, stochastic depth 0.1)."""
        model = create_model(model_name, num_classes=num_classes, drop_path_rate=drop_path_rate)
        num_params = sum(p.numel() for p in model.parameters())
        return cls(model_name, num_params, len(model.blocks), activation_bytes_per_clip(model))

    def step_activation_bytes(self, micro_batch: int) -> float:
        """Saved activations plus the backward pass's gradients of one block's activations."""
        return micro_batch * self.activation_bytes_per_clip * (1 + 1 / self.depth)

    def step_bytes(self, micro_batch: int, zero_stage: int, world_size: int, optimizer: str) -> float:
        """Peak bytes per GPU of one training step, without the reserve."""
        states = model_state_bytes(self.num_params, zero_stage, world_size, optimizer)
        return states + self.step_activation_bytes(micro_batch)


@dataclasses.dataclass(frozen=True)
class Plan:
    gpus: int
    micro_batch: int
    accumulation: int
    memory_gib: float  # estimated peak per GPU, reserve included


def max_micro_batch(
    footprint: ModelFootprint,
    gpus: int,
    gpu_memory_gib: float,
    zero_stage: int = 1,
    optimizer: str = "sgd",
    reserve_gib: float = 6.0,
) -> int:
    """The most clips per GPU per forward pass that fit in USABLE_FRACTION of the GPU's memory."""
    budget = (USABLE_FRACTION * gpu_memory_gib - reserve_gib) * GIB
    budget -= model_state_bytes(footprint.num_params, zero_stage, gpus, optimizer)
    return max(0, math.floor(budget / footprint.step_activation_bytes(1)))


def plan(
    footprint: ModelFootprint,
    gpus: int,
    gpu_memory_gib: float,
    global_batch: int,
    zero_stage: int = 1,
    optimizer: str = "sgd",
    reserve_gib: float = 6.0,
) -> Plan | None:
    """The largest micro-batch that fits and divides the per-GPU share of the global batch (the rest
    by gradient accumulation); None when not even one clip fits."""
    if global_batch % gpus:
        raise ValueError(f"global batch {global_batch} is not a multiple of {gpus} GPUs")
    per_gpu = global_batch // gpus
    fits = max_micro_batch(footprint, gpus, gpu_memory_gib, zero_stage, optimizer, reserve_gib)
    micro_batch = max((m for m in range(1, min(per_gpu, fits) + 1) if per_gpu % m == 0), default=0)
    if micro_batch == 0:
        return None
    memory = footprint.step_bytes(micro_batch, zero_stage, gpus, optimizer) / GIB + reserve_gib
    return Plan(gpus, micro_batch, per_gpu // micro_batch, round(memory, 1))


def sizing_table(
    footprint: ModelFootprint, gpu_counts: Sequence[int], gpu_memories: Sequence[float], global_batch: int
) -> str:
    """Markdown: one row per GPU count, one column per GPU memory size (ZeRO-1, SGD)."""
    header = "| GPUs | " + " | ".join(f"{memory:g} GiB GPUs" for memory in gpu_memories) + " |"
    lines = [header, "|---" * (len(gpu_memories) + 1) + "|"]
    for gpus in gpu_counts:
        cells = []
        for memory in gpu_memories:
            p = plan(footprint, gpus, memory, global_batch)
            cells.append(
                "does not fit" if p is None else f"{p.micro_batch} x {p.accumulation} ({p.memory_gib} GiB)"
            )
        lines.append(f"| {gpus} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def state_table(footprint: ModelFootprint, gpu_counts: Sequence[int], optimizer: str = "sgd") -> str:
    """Markdown: model-state GiB per GPU for ZeRO stages 0-3."""
    lines = ["| GPUs | ZeRO-0 | ZeRO-1 | ZeRO-2 | ZeRO-3 |", "|---|---|---|---|---|"]
    for gpus in gpu_counts:
        states = (model_state_bytes(footprint.num_params, stage, gpus, optimizer) / GIB for stage in range(4))
        lines.append(f"| {gpus} | " + " | ".join(f"{gib:.2f}" for gib in states) + " |")
    return "\n".join(lines)


def report(
    models: Sequence[str], gpu_counts: Sequence[int], gpu_memories: Sequence[float], global_batch: int
) -> str:
    footprints = [ModelFootprint.measure(name) for name in models]
    sections = []
    for footprint in footprints:
        sections += [
            f"{footprint.name}: {footprint.num_params / 1e6:.1f}M parameters, "
            f"{footprint.activation_bytes_per_clip / 2**20:.0f} MiB of activations per clip (bf16); "
            f"micro-batch x accumulation steps (estimated peak per GPU) for a global batch of {global_batch}:",
            "",
            sizing_table(footprint, gpu_counts, gpu_memories, global_batch),
            "",
            "Largest micro-batch per GPU (8 GPUs, ZeRO-1): "
            + ", ".join(f"{memory:g} GiB: {max_micro_batch(footprint, 8, memory)}" for memory in gpu_memories)
            + ".",
            "",
        ]
    sections += [
        f"Model states per GPU (GiB, SGD with momentum) of {footprints[0].name}:",
        "",
        state_table(footprints[0], gpu_counts),
    ]
    return "\n".join(sections)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", nargs="+", default=["xvit_b16_8x224", "xvit_b16_16x224"])
    parser.add_argument("--gpus", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32, 64])
    parser.add_argument("--gpu-memory", nargs="+", type=float, default=[40, 80, 141], help="GiB per GPU.")
    parser.add_argument(
        "--global-batch", type=int, default=128, help="Clips per optimizer step (paper: 128)."
    )
    args = parser.parse_args()
    print(report(args.model, args.gpus, args.gpu_memory, args.global_batch))


if __name__ == "__main__":
    main()
