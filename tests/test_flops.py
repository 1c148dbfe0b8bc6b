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
    ("name", "paper_gflops"),
    [
        ("xvit_b16_8x224", 425 / 3),  # X-ViT paper, Tables 4-5: GFLOPs for 3 views (1 clip x 3 crops)
        ("xvit_b16_16x224", 850 / 3),
        ("xvit_b16_16x224_k600", 850 / 3),  # the released models cost what the paper's 16x224 does
        ("xvit_b16_16x224_ssv2", 850 / 3),
    ],
)
def test_xvit_gflops_per_view_match_the_paper(name: str, paper_gflops: float) -> None:
    # 140.57 per view against 141.67 (-0.8%): the paper's 425 is 3 x 141.7 where a count gives 421.7
    assert model_info(name)["gflops"] == pytest.approx(paper_gflops, rel=0.01)


def test_frames_and_backbones_scale_as_a_straight_count_and_table_4_disagrees_for_32px_patches() -> None:
    """Table 4 (tokens): B/32 95, L/32 327, B/16 425 GFLOPs for 3 views. B/32 and L/32 agree with each
    other (327/95 = 3.44, counted 3.49) but not with B/16: any per-token count makes B/32 about a
    quarter of B/16 (50 vs 197 tokens a frame), 35.3 vs 140.6 per view, where the paper has 95/425 =
    0.22. So B/16 is the anchor (Tables 4-5 agree on it) and the /32 figures are documented, not met."""
    gflops = {
        name: model_info(name)["gflops"] for name in ("xvit_b16_8x224", "xvit_b32_8x224", "xvit_l32_8x224")
    }
    assert gflops["xvit_l32_8x224"] / gflops["xvit_b32_8x224"] == pytest.approx(327 / 95, rel=0.02)
    assert gflops["xvit_b32_8x224"] / gflops["xvit_b16_8x224"] == pytest.approx(0.251, abs=0.005)
    assert gflops["xvit_b32_8x224"] == pytest.approx(95 / 3, rel=0.15)  # +11.6%: the paper's inconsistency
    assert gflops["xvit_l32_8x224"] == pytest.approx(327 / 3, rel=0.15)  # +13.0%
    assert model_info("xvit_b16_32x224")["gflops"] == pytest.approx(4 * gflops["xvit_b16_8x224"], rel=1e-3)
    # ViT-L/16 costs 61.6 GMACs per 224 px image (timm): 8 frames plus X-ViT's tiny temporal head
    assert model_info("xvit_l16_8x224")["gflops"] == pytest.approx(8 * 61.6, rel=0.01)


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
