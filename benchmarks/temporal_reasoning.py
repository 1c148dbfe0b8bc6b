"""Issue 9.6, the science check: does space-time mixing read the order of the frames?

The synthetic dataset's classes come in time-reversed pairs (a clip played backwards is the other
class of its pair), so only frame order tells a clip from its partner. A model that ignores order
(spatial-only attention + temporal averaging) can learn which pair a clip belongs to but must stay at
50% between the two classes of the pair; X-ViT's mixed keys and values let each frame see its
neighbours and should separate them. Every variant is trained from scratch with the same budget,
data and optimizer, on real MP4s decoded by decord once (8 frames, uniform), by a plain PyTorch loop
(the science is about the models, not the training stack), two processes at a time, once per seed.
The ablation sweeps the mixed fraction of key/value channels (0, 1/8, 1/4, 1/2; shift_div 0, 16, 8,
4) with the temporal-attention head (optionally also the averaging head), as in the paper's Table 1
(SSv2, 8 frames), and reports the mean and spread over the seeds:

    python -m benchmarks.temporal_reasoning --seeds 3                 # writes benchmarks/results/
    python -m benchmarks.temporal_reasoning --seeds 3 --heads attention average
    # more seeds for two fractions, keeping the runs already in the committed result:
    python -m benchmarks.temporal_reasoning --seeds 8 --fractions 0.25 0.5 --no-baseline \
        --reuse benchmarks/results/temporal_reasoning.json
"""

from __future__ import annotations

import csv
import json
import logging
import multiprocessing
import statistics
import tempfile
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.optim.lr_scheduler import LRScheduler

from benchmarks.results import BenchmarkResult, Table, fmt
from benchmarks.seed_spread import (
    Spread,
    by_label,
    final,
    paired,
    plot_curves,
    run_and_write,
    seeds_parser,
)
from benchmarks.timing import torch_threads
from vidtx.clips.normalize import normalize_clips
from vidtx.clips.sampling import FrameSampler
from vidtx.config import OptimizerConfig, ScheduleConfig, SynthConfig
from vidtx.log import setup_logging
from vidtx.media.decode import open_video
from vidtx.models import create_model
from vidtx.shard.synthetic import CLASSES, PARTNER, generate_dataset
from vidtx.train.optim import build_optimizer, build_scheduler

log = logging.getLogger(__name__)

PAPER_TOP1 = {0.0: 55.6, 0.25: 63.3, 0.5: 63.4}  # X-ViT paper, Table 1: SSv2, 8 frames, TA head
MIXED_FRACTIONS = {0.0: 0, 0.125: 16, 0.25: 8, 0.5: 4}  # fraction of key/value channels -> shift_div
HEADS = ("average", "attention")
# Two variants "tie" when the 95% interval of their per-seed top-1 difference lies within this margin
# (fixed before measuring; the paper's 1/4 and 1/2 differ by 0.1 points).
TIE_MARGIN = 0.05
MEAN, STD = (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)


@dataclass(frozen=True)
class Budget:
    classes: tuple[str, ...]
    train_videos: int  # per class
    val_videos: int
    video_size: int
    crop: int
    steps: int
    batch_size: int
    eval_every: int
    lr: float = 1e-3
    warmup_steps: int = 20


FULL = Budget(CLASSES, 96, 24, 64, 56, 1000, 16, 100)
QUICK = Budget(CLASSES, 48, 24, 64, 56, 200, 16, 100)
# What both budgets must show (the quick one at step 200, where X-ViT mixing 1/4 reached 0.93 direction
# accuracy in the full runs): X-ViT reads frame order, spatial-only attention with averaging cannot.
XVIT_DIRECTION_AT_LEAST = 0.7
SPATIAL_DIRECTION_AT_MOST = 0.6


class ScienceCheckError(AssertionError):
    """A standard budget's runs do not show what the science check expects: `make bench` fails."""


@dataclass(frozen=True)
class Variant:
    label: str
    preset: str
    options: dict
    seed: int = 0


def mixed_fraction(options: dict) -> float | None:
    """The mixed fraction of an ablation variant's options (None for the presets as they are)."""
    return next((f for f, d in MIXED_FRACTIONS.items() if d == options.get("shift_div")), None)


def variants(
    quick: bool,
    seeds: int = 1,
    heads: tuple[str, ...] = ("attention",),
    fractions: tuple[float, ...] = tuple(MIXED_FRACTIONS),
    baseline: bool = True,
) -> list[Variant]:
    """Quick: spatial-only + averaging and X-ViT mixing 1/4 of the channels (the ablation's fastest
    learner: 0.93 direction accuracy at step 200 of the full runs, seed 0), seed 0. Full: spatial-only + averaging
    (unless not `baseline`) and the mixed-fraction x head ablation over `fractions` (X-ViT is its mix
    1/2, attention-head row), each per seed."""
    if quick:
        return [
            Variant("spatial-only + averaging", "spatial_avg_tiny", {}),
            Variant(
                "mix 0.25, attention head",
                "xvit_tiny",
                {"shift_div": MIXED_FRACTIONS[0.25], "temporal_head": "attention"},
            ),
        ]
    chosen = []
    for seed in range(seeds):
        if baseline:
            chosen.append(Variant("spatial-only + averaging", "spatial_avg_tiny", {}, seed))
        for head in heads:
            for fraction in fractions:
                options = {"shift_div": MIXED_FRACTIONS[fraction], "temporal_head": head}
                chosen.append(Variant(f"mix {fraction:g}, {head} head", "xvit_tiny", options, seed))
    return chosen


def reusable_runs(path: Path, budget: Budget) -> list[dict]:
    """The runs of an earlier result file measured with the same budget (an error names a different one)."""
    document = json.loads(path.read_text())
    if document["inputs"]["budget"] != json.loads(json.dumps(budget.__dict__)):
        raise SystemExit(f"{path} was measured with another budget: {document['inputs']['budget']}")
    return document["raw"]["results"]


def decode_videos(
    root: Path, split: str, size: tuple[int, int] | None = None
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Every frame of every video of a split, uint8 (frames, H, W, 3) per video, decoded at `size`
    (width, height; None: as stored), and the labels (N,)."""
    with open(root / "annotations.csv", newline="") as file:
        rows = [row for row in csv.DictReader(file) if row["split"] == split]
    videos = [open_video((root / row["path"]).read_bytes(), size=size) for row in rows]
    frames = [torch.from_numpy(video.frames(range(video.num_frames))) for video in videos]
    return frames, torch.tensor([CLASSES.index(row["label"]) for row in rows])


def decode_split(root: Path, split: str, num_frames: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every video of a split at `num_frames` uniform frames: uint8 (N, T, H, W, 3), labels (N,)."""
    videos, labels = decode_videos(root, split)
    return centre_frames(videos, FrameSampler("segment", num_frames)), labels


def centre_frames(videos: list[torch.Tensor], sampler: FrameSampler) -> torch.Tensor:
    """The test clip (segment centres) of each video's frames: uint8 (N, T, H, W, 3)."""
    return torch.stack([video[sampler.test(len(video))[0]] for video in videos])


def random_crops(clips: torch.Tensor, size: int, generator: torch.Generator) -> torch.Tensor:
    """One random size x size crop per clip (same box for all its frames): (B, T, size, size, 3)."""
    offsets = torch.randint(0, clips.shape[-2] - size + 1, (len(clips), 2), generator=generator)
    return torch.stack(
        [c[:, y : y + size, x : x + size] for c, (y, x) in zip(clips, offsets.tolist(), strict=True)]
    )


def model_input(clips: torch.Tensor) -> torch.Tensor:
    """uint8 (B, T, H, W, 3) -> normalised float (B, 3, T, H, W)."""
    return normalize_clips(clips, MEAN, STD)


def partner_index() -> torch.Tensor:
    """For each class, the index of its time-reversed partner."""
    return torch.tensor([CLASSES.index(PARTNER[name]) for name in CLASSES])


def evaluate(
    model: torch.nn.Module, clips: torch.Tensor, labels: torch.Tensor, crop: int
) -> tuple[float, float]:
    """(top-1, direction accuracy): the share of clips scored above their reversed partner class."""
    offset = (clips.shape[-2] - crop) // 2
    model.eval()
    with torch.no_grad():
        logits = torch.cat(
            [
                model(model_input(batch[:, :, offset : offset + crop, offset : offset + crop]))
                for batch in clips.split(64)
            ]
        )  # (N, classes)
    model.train()
    top1 = (logits.argmax(1) == labels).float().mean().item()
    partners = partner_index()[labels]
    direction = (
        (logits.gather(1, labels[:, None]) > logits.gather(1, partners[:, None])).float().mean().item()
    )
    return top1, direction


def train_variant(variant: Variant, data_file: Path, budget: Budget) -> dict:
    """Train one variant from its seed on one thread; its learning curve and final accuracies."""
    with torch_threads(1):
        train_clips, train_labels, val_clips, val_labels = torch.load(data_file)
        torch.manual_seed(variant.seed)  # the initial weights
        generator = torch.Generator().manual_seed(variant.seed)  # the batches and crops

        def draw_batch() -> tuple[torch.Tensor, torch.Tensor]:
            batch = torch.randint(0, len(train_clips), (budget.batch_size,), generator=generator)
            return random_crops(train_clips[batch], budget.crop, generator), train_labels[batch]

        options = {"img_size": budget.crop, "num_classes": len(CLASSES), **variant.options}
        model = create_model(variant.preset, **options)
        trained = fit(model, draw_batch, (val_clips, val_labels), budget, variant.label, variant.seed)
    return {**trained, "preset": variant.preset, "options": variant.options}


def optimizer_step(
    loss: torch.Tensor, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: LRScheduler
) -> float:
    """One step of the benchmarks' plain training loops: backward, the gradients clipped at norm 1, the
    optimizer and the schedule; the loss's value."""
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    return loss.item()


def fit(
    model: torch.nn.Module,
    draw_batch: Callable[[], tuple[torch.Tensor, torch.Tensor]],
    validation: tuple[torch.Tensor, torch.Tensor],
    budget: Budget,
    label: str,
    seed: int,
) -> dict:
    """The plain training loop every variant runs: `draw_batch()` gives uint8 clips (B, T, crop, crop,
    3) and labels (B,); AdamW with the budget's lr and warm-up, then cosine, gradient clipping at 1. Returns
    the run's label, seed and learning curve (one point per `budget.eval_every` steps)."""
    optimizer = build_optimizer(model, OptimizerConfig(name="adamw", lr=budget.lr, weight_decay=0.05))
    scheduler = build_scheduler(
        optimizer, ScheduleConfig(warmup_steps=budget.warmup_steps, min_lr_ratio=0.05), budget.steps
    )
    curve, losses = [], []
    for step in range(1, budget.steps + 1):
        clips, labels = draw_batch()
        loss = F.cross_entropy(model(model_input(clips)), labels)
        losses.append(optimizer_step(loss, model, optimizer, scheduler))
        if step % budget.eval_every == 0:
            top1, direction = evaluate(model, *validation, budget.crop)
            train_loss = sum(losses[-budget.eval_every :]) / budget.eval_every
            curve.append(
                {"step": step, "train_loss": train_loss, "val_top1": top1, "val_direction": direction}
            )
            log.info(
                "%s seed %d step %d: loss %.3f, val top-1 %.3f, direction %.3f",
                *(label, seed, step, train_loss, top1, direction),
            )
    return {"label": label, "seed": seed, "curve": curve}


def measure(budget: Budget, chosen: list[Variant], work: Path) -> list[dict]:
    """Generate and decode the dataset once, then train every variant, two processes at a time."""
    frames = 8
    synth = SynthConfig(
        output=work / "videos",
        classes=list(budget.classes),
        videos_per_class={"train": budget.train_videos, "val": budget.val_videos},
        size=budget.video_size,
    )
    root = generate_dataset(synth).parent
    data_file = work / "clips.pt"
    torch.save((*decode_split(root, "train", frames), *decode_split(root, "val", frames)), data_file)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=2, mp_context=context, initializer=setup_logging) as pool:
        return list(pool.map(train_variant, chosen, [data_file] * len(chosen), [budget] * len(chosen)))


def _compare(a: list[dict], b: list[dict]) -> str:
    """The per-seed difference in final top-1 (same seed: same initial weights, batches and crops),
    its 95% interval, and what that interval says."""
    difference = paired(a, b, "val_top1")
    meaning = {
        "differ": "the interval excludes 0: they differ",
        "tie": f"the interval lies within ±{TIE_MARGIN:.0%}: a tie",
        "unsettled": f"the interval includes 0 but reaches beyond ±{TIE_MARGIN:.0%}: not settled",
    }[difference.verdict(TIE_MARGIN)]
    return f"{difference}; {meaning}"


def findings(results: list[dict], budget: Budget) -> list[str]:
    grouped = by_label(results)
    xvit_label = next(
        label for label in ("mix 0.5, attention head", "mix 0.25, attention head") if label in grouped
    )
    spatial, xvit = grouped["spatial-only + averaging"], grouped[xvit_label]

    def seeds(runs: list[dict]) -> str:
        return f"{len(runs)} seed{'s' if len(runs) > 1 else ''}"

    notes = [
        f"After {budget.steps} steps X-ViT ({xvit_label}, {seeds(xvit)}) reaches "
        f"{final(xvit, 'val_top1')} validation top-1 (chance {1 / len(budget.classes):.1%}) and tells "
        f"{final(xvit, 'val_direction')} of the clips from their reversed partner; spatial-only + averaging "
        f"({seeds(spatial)}) reaches {final(spatial, 'val_top1')} top-1 and {final(spatial, 'val_direction')} "
        "direction accuracy. "
        "Averaging per-frame features cannot see order: at best it finds a clip's pair and guesses between "
        "its two classes, so its ceilings are 50% top-1 and 50% direction accuracy."
    ]
    quarter, half = grouped.get("mix 0.25, attention head"), grouped.get("mix 0.5, attention head")
    if not (quarter and half):
        return notes
    chance = 1 / len(budget.classes)
    mixes = {label: runs for label, runs in grouped.items() if label.endswith("attention head")}
    stalled = ", ".join(
        f"{label.split(',')[0]}: {sum(run['curve'][-1]['val_top1'] <= chance + 0.02 for run in runs)} of {len(runs)}"
        for label, runs in mixes.items()
    )
    unmixed = grouped["mix 0, attention head"]
    notes.append(
        "Ablation with the temporal-attention head, final validation top-1: "
        + "; ".join(f"{label.split(',')[0]} {final(runs, 'val_top1')}" for label, runs in mixes.items())
        + f". Runs still at chance after {budget.steps} steps (top-1 within 2 points of {chance:.1%}): {stalled}. "
        f"Per seed, mixing 1/2 minus none: {_compare(half, unmixed)}. 1/4 minus none: "
        f"{_compare(quarter, unmixed)}. 1/2 minus 1/4: {_compare(half, quarter)}. "
        "The paper (SSv2, 8 frames) has 55.6 without mixing, 63.3 with 1/4 and 63.4 with 1/2. Without mixing "
        "the TA head sees an unordered set of frame features (it has no temporal position, as in the paper), "
        "so only the backbone's zero-initialised temporal embedding could carry order."
    )
    return notes


def science_check(results: list[dict]) -> list[str]:
    """What the runs contradict of the expected: X-ViT's final direction accuracy at least
    XVIT_DIRECTION_AT_LEAST, spatial-only + averaging's at most SPATIAL_DIRECTION_AT_MOST (every seed)."""
    problems = []
    for run in results:
        direction = run["curve"][-1]["val_direction"]
        if run["label"] == "spatial-only + averaging" and direction > SPATIAL_DIRECTION_AT_MOST:
            problems.append(
                f"{run['label']} (seed {run['seed']}) tells direction {direction:.3f} > {SPATIAL_DIRECTION_AT_MOST}"
            )
        if (
            run["label"].endswith("attention head")
            and mixed_fraction(run["options"])
            and direction < XVIT_DIRECTION_AT_LEAST
        ):
            problems.append(
                f"{run['label']} (seed {run['seed']}) tells direction {direction:.3f} < {XVIT_DIRECTION_AT_LEAST}"
            )
    return problems


def run(
    output_dir: Path,
    quick: bool = False,
    seeds: int = 3,
    heads: tuple[str, ...] = ("attention",),
    fractions: tuple[float, ...] = tuple(MIXED_FRACTIONS),
    baseline: bool = True,
    reuse: Path | None = None,
    budget: Budget | None = None,
) -> BenchmarkResult:
    """Train the chosen variants for seeds 0..`seeds`-1 and report them; with `reuse`, the runs of that
    earlier result file are kept (and reported) and only the (variant, seed) pairs it lacks are trained.
    `budget` (default: QUICK or FULL) other than those two is a smoke run: nothing is expected of it;
    a standard budget whose runs fail `science_check` raises ScienceCheckError (its figure is written)."""
    budget = budget or (QUICK if quick else FULL)
    earlier = reusable_runs(reuse, budget) if reuse else []
    done = {(run["label"], run["seed"]) for run in earlier}
    chosen = [v for v in variants(quick, seeds, heads, fractions, baseline) if (v.label, v.seed) not in done]
    with tempfile.TemporaryDirectory() as tmp:
        results = earlier + (measure(budget, chosen, Path(tmp)) if chosen else [])
    result = report(results, budget, quick, output_dir)
    if budget in (QUICK, FULL) and (problems := science_check(results)):
        raise ScienceCheckError("science check failed: " + "; ".join(problems))
    return result


def report(results: list[dict], budget: Budget, quick: bool, output_dir: Path) -> BenchmarkResult:
    """Tables, findings and the learning-curve figure (written to `output_dir`) of measured runs."""
    output_dir.mkdir(parents=True, exist_ok=True)
    figure = "temporal_reasoning.png"
    plot_curves(results, output_dir / figure)
    rows = []
    for label, runs in by_label(results).items():
        options = runs[0]["options"]
        paper = (
            PAPER_TOP1.get(mixed_fraction(options)) if options.get("temporal_head") == "attention" else None
        )
        best = Spread(tuple(max(point["val_top1"] for point in run["curve"]) for run in runs))
        rows.append(
            [
                label,
                str(len(runs)),
                fmt(statistics.fmean(run["curve"][-1]["train_loss"] for run in runs)),
                str(final(runs, "val_top1")),
                str(best),
                str(final(runs, "val_direction")),
                "" if paper is None else f"{paper}",
            ]
        )
    columns = ["model", "seeds", "final train loss (mean)", "val top-1", "best val top-1"]
    table = Table(
        "Validation accuracy after the same training budget: mean ± standard deviation (worst-best seed)",
        [*columns, "direction accuracy", "paper SSv2 top-1"],
        rows,
    )
    return BenchmarkResult(
        name="temporal_reasoning",
        title="Science check: frame order on the synthetic dataset",
        summary=(
            f"{len(budget.classes)} synthetic classes in time-reversed pairs, {budget.train_videos} training and "
            f"{budget.val_videos} validation MP4s per class ({budget.video_size} px, 16 frames; 8 uniform frames "
            f"decoded by decord), random {budget.crop} px crops for training, centre crop for validation. Every "
            "model: tiny preset (width 96, depth 4, 4 heads, 8 px patches, initial positions std 0.1), AdamW "
            f"lr {budget.lr:g} (weight decay 0.05, 20 warm-up steps, cosine), {budget.steps} steps of "
            f"{budget.batch_size} clips, one CPU "
            "thread; seed s sets the initial weights and the batches and crops, the data are the same for "
            "every run. Direction accuracy: the share of validation clips whose own class scores above its "
            "time-reversed partner (50% = blind to order). X-ViT (the xvit_tiny preset) is the mix 1/2, "
            "attention-head configuration."
        ),
        inputs={"budget": budget.__dict__, "quick": quick, "seeds": sorted({r["seed"] for r in results})},
        tables=[table],
        raw={"results": results},
        notes=findings(results, budget),
        figures=[figure],
        quick=quick,
    )


def main(argv: list[str] | None = None) -> None:
    parser = seeds_parser("python -m benchmarks.temporal_reasoning", __doc__, default=3)
    parser.add_argument(
        "--heads", nargs="+", choices=HEADS, default=["attention"], help="temporal heads to ablate"
    )
    parser.add_argument(
        "--fractions",
        nargs="+",
        type=float,
        choices=list(MIXED_FRACTIONS),
        default=list(MIXED_FRACTIONS),
        help="mixed fractions to ablate",
    )
    parser.add_argument("--no-baseline", action="store_true", help="leave out spatial-only + averaging")
    parser.add_argument(
        "--reuse", type=Path, help="an earlier result file: keep its runs, train only what it lacks"
    )
    run_and_write(
        parser,
        argv,
        lambda args: run(
            args.output,
            seeds=args.seeds,
            heads=tuple(args.heads),
            fractions=tuple(args.fractions),
            baseline=not args.no_baseline,
            reuse=args.reuse,
        ),
    )


if __name__ == "__main__":
    main()
