"""`vidtx plan`: GPU memory per ZeRO stage and micro-batch, and step times, for a config."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vidtx import gpu_plan
from vidtx.config import load_config
from vidtx.models import create_model

ROOT = Path(__file__).resolve().parent.parent
SSV2 = [
    ROOT / "configs/experiments/ssv2_xvit_b16_8f.yaml",
    ROOT / "configs/experiments/ssv2_xvit_b16_16f.yaml",
]


def test_model_states_split_as_zero_stages_say() -> None:
    params, gpus = 1000, 8
    by_stage = [gpu_plan.model_state_bytes(params, stage, gpus, "sgd") for stage in range(4)]
    # bf16 weights 2 + bf16 gradients 2 + fp32 master 4 + momentum 4 bytes per parameter
    assert by_stage == [12 * params, (4 + 8 / gpus) * params, (2 + 10 / gpus) * params, 12 * params / gpus]
    assert gpu_plan.model_state_bytes(params, 0, gpus, "adamw") == 16 * params
    assert all(gpu_plan.model_state_bytes(params, stage, 1, "sgd") == 12 * params for stage in range(4))


def test_activations_are_measured_and_grow_with_the_frames() -> None:
    eight, sixteen = (
        gpu_plan.activation_bytes_per_clip(create_model("xvit_tiny", num_frames=t)) for t in (8, 16)
    )
    assert eight > 0
    assert 1.9 < sixteen / eight < 2.1  # linear in tokens: fused attention keeps no (S, S) matrix


SYNTHETIC = gpu_plan.ModelFootprint(
    "synthetic", num_params=100_000_000, depth=12, activation_bytes_per_clip=2**30, train_flops_per_clip=1e12,
    block_activation_bytes_per_clip=2**30 / 12,
)  # fmt: skip


def test_activation_checkpointing_is_accounted_for() -> None:
    """With every block checkpointed, the forward keeps the blocks' inputs only, and the backward
    recomputes one block's activations on top: a larger micro-batch fits."""
    sizes = ["model.name=xvit_tiny", "data.crop_size=56", "data.num_frames=8"]
    plain = gpu_plan.ModelFootprint.measure(load_config(None, sizes))
    checkpointed = gpu_plan.ModelFootprint.measure(
        load_config(None, [*sizes, "train.activation_checkpointing=1"])
    )
    assert (plain.recomputes, checkpointed.recomputes) == (False, True)
    assert checkpointed.block_activation_bytes_per_clip == plain.block_activation_bytes_per_clip
    assert checkpointed.activation_bytes_per_clip < 0.4 * plain.activation_bytes_per_clip
    block = plain.block_activation_bytes_per_clip
    assert plain.step_activation_bytes(4) == 4 * (plain.activation_bytes_per_clip + block)
    assert checkpointed.step_activation_bytes(4) == 4 * (checkpointed.activation_bytes_per_clip + 2 * block)
    assert checkpointed.step_activation_bytes(4) < plain.step_activation_bytes(4)


def test_plans_fill_the_global_batch_within_the_memory() -> None:
    for gpus in (1, 2, 4, 8, 16):
        for memory in (24.0, 80.0):
            p = gpu_plan.plan(SYNTHETIC, gpus, memory, global_batch=128)
            assert p.micro_batch * p.accumulation * gpus == 128
            assert p.memory_gib <= gpu_plan.USABLE_FRACTION * memory
            larger = [m for m in range(p.micro_batch + 1, 128 // gpus + 1) if (128 // gpus) % m == 0]
            assert not larger or larger[0] > gpu_plan.max_micro_batch(SYNTHETIC, gpus, memory)
    assert gpu_plan.plan(SYNTHETIC, 1, 6.0, global_batch=128) is None  # the reserve alone fills it
    with pytest.raises(ValueError, match="multiple"):
        gpu_plan.plan(SYNTHETIC, 3, 80.0, global_batch=128)


def test_a_higher_zero_stage_fits_a_larger_micro_batch() -> None:
    fits = [gpu_plan.max_micro_batch(SYNTHETIC, 8, 24.0, stage) for stage in range(4)]
    assert fits == sorted(fits)
    assert fits[3] > fits[0]


def test_step_time_from_a_measured_or_a_computed_throughput() -> None:
    assert gpu_plan.step_seconds(global_batch=128, gpus=8, clips_per_second_per_gpu=4.0) == pytest.approx(4.0)
    # 1 TFLOP per training clip at 40% of a 1000 TFLOP/s peak: 400 clips/s
    assert gpu_plan.clips_per_second_at(SYNTHETIC, peak_tflops=1000, mfu=0.4) == pytest.approx(400.0)


def test_vidtx_plan_prints_step_times_for_a_tiny_config() -> None:
    overrides = ["model.name=xvit_tiny", "data.crop_size=56", "data.short_side=64", "data.num_frames=8"]
    command = [sys.executable, "-m", "vidtx", "plan", str(SSV2[0]), "--gpus", "8", "--gpus", "16"]
    command += [*(f"--set={override}" for override in overrides), "--clips-per-second", "4"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert "| 8 |" in result.stdout
    assert "Step time at 4.0 clips/s per GPU: 8 GPUs: 4.00 s, 16 GPUs: 2.00 s." in result.stdout


def test_readme_sizing_tables_are_what_vidtx_plan_prints() -> None:
    """infra/README.md's numbers come from `vidtx plan` of the SSv2 recipes (X-ViT B/16, measured on
    fake tensors: ~3 s)."""
    report = gpu_plan.report([load_config(path) for path in SSV2], [1, 2, 4, 8, 16, 32, 64], [40, 80, 141])
    assert report in (ROOT / "infra/README.md").read_text()
