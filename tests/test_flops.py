"""Measured FLOPs (MACs, fvcore convention) against the papers' figures and the attention cost model."""

import os
import subprocess
import sys

import pytest
import torch

from vidtx.models import count_flops, create_model, list_models, model_info
from vidtx.nn import MultiHeadAttention


@pytest.mark.parametrize("impl", ["sdpa", "math"])
def test_count_flops_is_half_the_flop_counter_on_a_known_layer(impl: str) -> None:
    attention = MultiHeadAttention(64, 4, attention_impl=impl)  # type: ignore[arg-type]
    flops = count_flops(attention, (1, 10, 64))
    projections = 10 * 64 * 3 * 64 + 10 * 64 * 64  # qkv + output projection
    products = 2 * 10 * 10 * 64  # QKᵀ and AV over all heads
    assert flops.attention == products
    assert flops.total == projections + products


def test_count_flops_leaves_the_model_as_it_was() -> None:
    model = create_model("xvit_tiny").train()
    before = {name: param.clone() for name, param in model.named_parameters()}
    count_flops(model, (1, 3, 8, 56, 56))
    assert model.training
    for name, param in model.named_parameters():
        assert param.device.type == "cpu"
        assert torch.equal(param, before[name]), name
    fp32 = count_flops(model, (1, 3, 8, 56, 56)).total
    assert count_flops(model.bfloat16(), (1, 3, 8, 56, 56)).total == fp32  # a bf16 model (DeepSpeed) too


@pytest.mark.parametrize(
    ("name", "paper_gflops"), [("xvit_b16_8x224", 425 / 3), ("xvit_b16_16x224", 850 / 3)]
)
def test_xvit_gflops_per_view_match_the_paper(name: str, paper_gflops: float) -> None:
    # X-ViT paper, Table 5: 425 / 850 GFLOPs for 3 views (1 clip x 3 crops)
    assert model_info(name)["gflops"] == pytest.approx(paper_gflops, rel=0.03)


@pytest.mark.parametrize(
    ("name", "overrides", "paper_gflops", "paper_params_m"),
    [
        ("spatial_avg_b16_8x224", {}, 141, 86.11),  # TimeSformer "space only" (mmaction2 zoo)
        ("joint_b16_8x224", {}, 180, 86.11),  # TimeSformer "joint space-time"
        ("timesformer_b16_8x224", {}, 196, 121.4),  # TimeSformer divided space-time
        ("vivit_fe_b16_8x224", {"num_frames": 32}, 284.4, 115.1),  # ViViT-B FE 16x2, 32 frames
    ],
)
def test_baseline_gflops_and_params_match_their_papers(
    name: str, overrides: dict[str, int], paper_gflops: float, paper_params_m: float
) -> None:
    info = model_info(name, **overrides)
    assert info["gflops"] == pytest.approx(paper_gflops, rel=0.03)
    assert info["params"] / 1e6 == pytest.approx(paper_params_m, rel=0.01)


def test_attention_cost_xvit_equals_spatial_and_joint_is_t_times_larger() -> None:
    xvit = model_info("xvit_b16_8x224")["attention_gflops"]
    spatial = model_info("spatial_avg_b16_8x224")["attention_gflops"]
    joint = model_info("joint_b16_8x224")["attention_gflops"]
    head = model_info("xvit_b16_8x224", temporal_head="average")["attention_gflops"]
    assert head == pytest.approx(spatial)  # mixing adds no attention FLOPs; only the TA head's tiny layer
    assert xvit - spatial < 1e-3 * spatial
    assert joint / spatial == pytest.approx(8, rel=0.02)  # (1 + 8·196)² vs 8 · 197² tokens²


def test_model_info_counts_the_real_parameters() -> None:
    for name in list_models():
        if name.endswith("_tiny"):
            model = create_model(name)
            info = model_info(name)
            assert info["params"] == sum(p.numel() for p in model.parameters())
            assert info["num_frames"] == model.num_frames
            assert info["defaults"]["img_size"] == 56


def test_cli_lists_every_preset_with_its_gflops() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "vidtx", "models"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "COLUMNS": "160"},
    )
    assert result.returncode == 0, result.stderr
    rows = {line.split("|")[1].strip(): line for line in result.stdout.splitlines() if line.count("|") > 3}
    assert set(list_models()) <= set(rows)
    gflops = float(rows["xvit_b16_8x224"].split("|")[5])
    assert gflops == pytest.approx(model_info("xvit_b16_8x224")["gflops"], abs=0.01)
