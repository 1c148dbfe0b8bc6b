"""Planning a GPU run: memory per GPU by ZeRO stage, micro-batch and GPU count, and the step time.

    vidtx plan configs/experiments/ssv2_xvit_b16_8f.yaml configs/experiments/ssv2_xvit_b16_16f.yaml
    vidtx plan configs/experiments/ssv2_xvit_b16_16f.yaml --gpus 8 16 --gpu-memory 80 --mfu 0.4

The model, frames, crop size, ZeRO stage, optimizer and global batch come from the config (the
tables of infra/README.md are the SSv2 recipes'); the number of classes from `--classes`.

Memory per GPU = model states + activations + a fixed reserve:

- Model states, accounted as in the ZeRO paper (arXiv:1910.02054, sec. 3 and 5) for bf16 training:
  bf16 weights (2 bytes per parameter), bf16 gradients (2), and fp32 master weights plus optimizer
  states (4 + 4 per state: SGD with momentum keeps one state, AdamW two). ZeRO-1 splits the fp32
  part over the GPUs, ZeRO-2 the gradients as well, ZeRO-3 the weights too.
- Activations are measured, not modelled: one training-mode forward pass of the real model runs in
  bf16 under `torch.autograd.graph.saved_tensors_hooks`, which sees every tensor kept for the
  backward pass; the distinct storages that are not parameters are summed. It runs on fake CPU
  tensors (torch's FakeTensorMode): the CPU's kernels are chosen and every shape and storage is
  real, but nothing is computed, so a B/16 at 16x224 is measured in a second. The fused attention
  keeps no (S, S) matrix, so this grows linearly with the micro-batch. The backward pass holds the
  gradients of one block's activations on top (one depth-th more). With activation checkpointing
  (`train.activation_checkpointing`) the forward runs checkpointed, so only what it keeps is counted,
  and the backward pass recomputes one checkpointed block's activations on top (another depth-th).
- The reserve covers the CUDA context, cuBLAS and NCCL workspaces and allocator fragmentation, and
  plans use at most 90% of a GPU: planning allowances, not measurements. Check a real run's peak
  (`torch.cuda.max_memory_allocated`) before you trust the last GiB.

Step time = global batch / (GPUs x clips per second per GPU), where the clips per second are measured
(a run's `train/clips_per_second` divided by its GPUs) or come from a peak and an MFU: peak x MFU /
training FLOPs per clip (3 forward passes of multiply-adds, 2 FLOPs each).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from vidtx.config import PipelineConfig
from vidtx.markdown import markdown_table
from vidtx.model_factory import build_model
from vidtx.models import VideoTransformer, count_flops

GIB = 2**30
USABLE_FRACTION = 0.9  # of a GPU's memory that a plan may fill, reserve included
OPTIMIZER_STATES = {"sgd": 1, "adamw": 2}  # fp32 tensors per parameter (momentum; first and second moment)


def activation_bytes_per_clip(model: VideoTransformer) -> int:
    """Bytes of the tensors a bf16 training forward pass of one clip keeps for its backward pass.
    `model` may be on any device, the meta device included: its weights are replaced by fake bf16
    CPU tensors of the same shapes for the call."""
    was_training = model.training
    model.train()
    saved: dict[int, torch.UntypedStorage] = {}  # id -> storage (held, so that ids stay unique)
    with FakeTensorMode():
        state = {
            name: torch.empty(
                tensor.shape,
                dtype=torch.bfloat16 if tensor.is_floating_point() else tensor.dtype,
                requires_grad=tensor.requires_grad,
            )
            for name, tensor in itertools.chain(model.named_parameters(), model.named_buffers())
        }
        weights = {id(tensor.untyped_storage()) for tensor in state.values()}

        def keep(tensor: torch.Tensor) -> torch.Tensor:
            storage = tensor.untyped_storage()  # one Python object per storage: views share it
            if id(storage) not in weights:
                saved[id(storage)] = storage
            return tensor

        clip = torch.empty(1, 3, model.num_frames, model.img_size, model.img_size, dtype=torch.bfloat16)
        try:
            with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
                torch.func.functional_call(model, state, (clip,))  # (1, num_classes)
        finally:
            model.train(was_training)
        return sum(storage.nbytes() for storage in saved.values())


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
    """What the memory and time of a training step depend on, measured once per config."""

    name: str
    num_params: int
    depth: int
    activation_bytes_per_clip: int  # kept for the backward pass, checkpointing as the config asks
    train_flops_per_clip: float  # forward + backward, in FLOPs (not multiply-adds)
    block_activation_bytes_per_clip: float  # one block's activations, recomputed or not: all of them / depth
    recomputes: bool = False  # activation checkpointing on: a block's activations rebuilt in the backward

    @classmethod
    def measure(cls, config: PipelineConfig, num_classes: int = 174) -> ModelFootprint:
        """The model `config` trains, with `num_classes` classes (174: SSv2)."""
        data = config.data
        with torch.device("meta"):  # shapes only: nothing is initialised or computed
            model = build_model(
                config.model.model_copy(update={"pretrained": None}),
                num_classes=num_classes,
                num_frames=data.num_frames,
                img_size=data.crop_size,
            )
        clip = (1, 3, data.num_frames, data.crop_size, data.crop_size)
        flops = 3 * 2 * count_flops(model, clip).total
        num_params = sum(p.numel() for p in model.parameters())
        every_activation = activation_bytes_per_clip(model)
        model.set_activation_checkpointing(config.train.activation_checkpointing)
        kept = activation_bytes_per_clip(model)
        depth = len(model.blocks)
        block = every_activation / depth
        return cls(config.model.name, num_params, depth, kept, flops, block, kept < every_activation)

    def step_activation_bytes(self, micro_batch: int) -> float:
        """Saved activations plus the backward pass's gradients of one block's activations (and, with
        checkpointing, that block's recomputed activations)."""
        on_top = self.block_activation_bytes_per_clip * (2 if self.recomputes else 1)
        return micro_batch * (self.activation_bytes_per_clip + on_top)

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
    footprint: ModelFootprint,
    gpu_counts: Sequence[int],
    gpu_memories: Sequence[float],
    global_batch: int,
    zero_stage: int = 1,
    optimizer: str = "sgd",
) -> str:
    """Markdown: one row per GPU count, one column per GPU memory size."""
    rows = []
    for gpus in gpu_counts:
        cells = []
        for memory in gpu_memories:
            p = plan(footprint, gpus, memory, global_batch, zero_stage, optimizer)
            cells.append(
                "does not fit" if p is None else f"{p.micro_batch} x {p.accumulation} ({p.memory_gib} GiB)"
            )
        rows.append([gpus, *cells])
    return markdown_table(["GPUs", *(f"{memory:g} GiB GPUs" for memory in gpu_memories)], rows)


def state_table(footprint: ModelFootprint, gpu_counts: Sequence[int], optimizer: str = "sgd") -> str:
    """Markdown: model-state GiB per GPU for ZeRO stages 0-3."""
    rows = [
        [
            gpus,
            *(
                f"{model_state_bytes(footprint.num_params, stage, gpus, optimizer) / GIB:.2f}"
                for stage in range(4)
            ),
        ]
        for gpus in gpu_counts
    ]
    return markdown_table(["GPUs", "ZeRO-0", "ZeRO-1", "ZeRO-2", "ZeRO-3"], rows)


def step_seconds(global_batch: int, gpus: int, clips_per_second_per_gpu: float) -> float:
    """Seconds per optimizer step when every GPU trains `clips_per_second_per_gpu` clips a second."""
    return global_batch / (gpus * clips_per_second_per_gpu)


def clips_per_second_at(footprint: ModelFootprint, peak_tflops: float, mfu: float) -> float:
    """Clips a GPU trains per second at `mfu` of a `peak_tflops` peak."""
    return peak_tflops * 1e12 * mfu / footprint.train_flops_per_clip


def report(
    configs: Sequence[PipelineConfig],
    gpu_counts: Sequence[int],
    gpu_memories: Sequence[float],
    *,
    num_classes: int = 174,
    clips_per_second: float | None = None,
    mfu: float | None = None,
) -> str:
    """Markdown: per config, the micro-batch table and the largest micro-batch; the model states by
    ZeRO stage of the first; step times when a throughput (measured, or peak x MFU) is given."""
    sections = []
    for config in configs:
        train, optimizer = config.train, config.train.optimizer.name
        global_batch = train.global_batch_size or train.micro_batch_size * train.num_workers
        footprint = ModelFootprint.measure(config, num_classes)
        sections += [
            f"{config.name} ({footprint.name}, {config.data.num_frames}x{config.data.crop_size}): "
            f"{footprint.num_params / 1e6:.1f}M parameters, "
            f"{footprint.activation_bytes_per_clip / 2**20:.0f} MiB of activations per clip (bf16); "
            f"micro-batch x accumulation steps (estimated peak per GPU, ZeRO-{train.zero_stage}, {optimizer}) "
            f"for a global batch of {global_batch}:",
            "",
            sizing_table(footprint, gpu_counts, gpu_memories, global_batch, train.zero_stage, optimizer),
            "",
            f"Largest micro-batch per GPU (8 GPUs, ZeRO-{train.zero_stage}): "
            + ", ".join(
                f"{memory:g} GiB: {max_micro_batch(footprint, 8, memory, train.zero_stage, optimizer)}"
                for memory in gpu_memories
            )
            + ".",
            "",
        ]
        per_gpu = clips_per_second
        if per_gpu is None and mfu is not None and train.peak_tflops is not None:
            per_gpu = clips_per_second_at(footprint, train.peak_tflops, mfu)
        if per_gpu is not None:
            times = ", ".join(
                f"{gpus} GPUs: {step_seconds(global_batch, gpus, per_gpu):.2f} s" for gpus in gpu_counts
            )
            sections += [f"Step time at {per_gpu:.1f} clips/s per GPU: {times}.", ""]
    first = ModelFootprint.measure(configs[0], num_classes)
    sections += [
        f"Model states per GPU (GiB, {configs[0].train.optimizer.name}) of {first.name}:",
        "",
        state_table(first, gpu_counts, configs[0].train.optimizer.name),
    ]
    return "\n".join(sections)
