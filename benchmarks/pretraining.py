"""Issue 59: a masked-autoencoder pretraining step against a supervised step of the same model and batch.

Each candidate is one training step's compute, forward + loss + backward, on the same clips: the
supervised step runs the whole network on every token and a cross-entropy on its logits; the
pretraining step (`vidtx.models.mae`, tube masking at 0.9, VideoMAE's small-model decoder: 4 blocks,
192 wide, 3 heads) runs the encoder on the visible tenth of the tokens and the decoder on all of them.
Models: the joint space-time ViT and X-ViT at ViT-S width (384, 12 blocks, 6 heads, 16x16 patches),
16 frames of 112x112 (VideoMAE pretrains ViT-S and -B on 16 frames): 784 tokens a clip, 5 of each
frame's 49 visible after the mask. Time is interleaved and compared per round (`benchmarks.timing`); peak memory
is the most bytes of tensors alive at once during the step. One torch thread, fp32 (this CPU has no
native bf16); `benchmarks/gpu.py` would measure the same on a GPU.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path

import torch
from torch.nn import functional as F

from benchmarks.results import BenchmarkResult, Table, fmt
from benchmarks.timing import peak_memory, round_ratios, time_interleaved, torch_threads
from vidtx.models import create_model
from vidtx.models.mae import MaskedAutoencoder

log = logging.getLogger(__name__)

SMALL = {"embed_dim": 384, "depth": 12, "num_heads": 6, "patch_size": 16}  # ViT-S/16
MODELS = {"joint space-time ViT-S/16": "joint_b16_8x224", "X-ViT S/16": "xvit_b16_8x224"}
CLIP = {"num_frames": 16, "img_size": 112}
QUICK_CLIP = {"num_frames": 8, "img_size": 64}
BATCH, CLASSES, MASK_RATIO = 2, 174, 0.9
DECODER = {"decoder_depth": 4, "decoder_dim": 192, "decoder_heads": 3}


def supervised_step(model: torch.nn.Module, clips: torch.Tensor, labels: torch.Tensor) -> None:
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(clips), labels).backward()


def pretraining_step(model: MaskedAutoencoder, clips: torch.Tensor) -> None:
    model.zero_grad(set_to_none=True)
    model(clips).loss.backward()


def measure(preset: str, clip: dict[str, int], repeats: int) -> dict:
    torch.manual_seed(0)
    supervised = create_model(preset, num_classes=CLASSES, **SMALL, **clip).train()
    encoder = create_model(preset, num_classes=CLASSES, **SMALL, **clip)
    pretraining = MaskedAutoencoder(encoder, mask_ratio=MASK_RATIO, masking="tube", **DECODER).train()
    clips = torch.randn(BATCH, 3, clip["num_frames"], clip["img_size"], clip["img_size"])
    labels = torch.randint(0, CLASSES, (BATCH,))
    steps = {
        "supervised": partial(supervised_step, supervised, clips, labels),
        "pretraining": partial(pretraining_step, pretraining, clips),
    }
    seconds = time_interleaved(steps, warmup=1, repeats=repeats)
    return {
        "seconds": seconds,
        "ratio": round_ratios(seconds["pretraining"], seconds["supervised"]),
        "peak_bytes": {name: peak_memory(step) for name, step in steps.items()},
        "tokens": pretraining.steps * pretraining.patches,
        "visible": round(pretraining.patches * (1 - MASK_RATIO)) * pretraining.steps,
    }


def run(output_dir: Path, quick: bool = False) -> BenchmarkResult:
    clip = QUICK_CLIP if quick else CLIP
    repeats = 2 if quick else 5
    raw, rows = {}, []
    with torch_threads(1):
        for label, preset in MODELS.items():
            log.info("pretraining step: %s", label)
            case = measure(preset, clip, repeats)
            raw[label] = case
            memory = case["peak_bytes"]
            rows.append(
                [
                    label,
                    f"{case['visible']} of {case['tokens']}",
                    fmt(case["seconds"]["supervised"].median),
                    fmt(case["seconds"]["pretraining"].median),
                    f"{fmt(case['ratio'].median, 2)}x",
                    fmt(memory["supervised"] / 1e6),
                    fmt(memory["pretraining"] / 1e6),
                    f"{fmt(memory['pretraining'] / memory['supervised'], 2)}x",
                ]
            )
    ratios = [case["ratio"].median for case in raw.values()]
    memory_ratios = [
        case["peak_bytes"]["pretraining"] / case["peak_bytes"]["supervised"] for case in raw.values()
    ]
    notes = [
        f"A pretraining step at mask {MASK_RATIO} takes {fmt(min(ratios), 2)}-{fmt(max(ratios), 2)}x the time of "
        f"a supervised step of the same model and batch, and {fmt(min(memory_ratios), 2)}-{fmt(max(memory_ratios), 2)}x "
        "its peak memory (goal: at most 0.4x the time; VideoMAE reports a 3.2x speed-up, 0.31x).",
        "The saving is the encoder's: it runs on the visible tokens only, and its attention's cost falls with the "
        "square of the sequence for the joint ViT, linearly for X-ViT (whose attention is per frame); the "
        "decoder, 4 blocks 192 wide, runs on every token.",
    ]
    return BenchmarkResult(
        name="pretraining",
        title="Masked-autoencoder pretraining step vs supervised step",
        summary=(__doc__ or "").strip(),
        inputs={
            "models": MODELS,
            "clip": clip,
            "batch": BATCH,
            "mask_ratio": MASK_RATIO,
            "decoder": DECODER,
            "small": SMALL,
            "repeats": repeats,
        },
        tables=[
            Table(
                "One training step's compute (forward, loss, backward), median of interleaved rounds",
                [
                    "model",
                    "tokens encoded",
                    "supervised (s)",
                    "pretraining (s)",
                    "time ratio",
                    "supervised peak (MB)",
                    "pretraining peak (MB)",
                    "memory ratio",
                ],
                rows,
            )
        ],
        raw=raw,
        notes=notes,
        quick=quick,
    )
