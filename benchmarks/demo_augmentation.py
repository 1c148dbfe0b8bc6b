"""Issue 17.10: does the demo's training augmentation slow its learning of frame order?

The science check (benchmarks.temporal_reasoning) trains on the 8 uniform frames of each video with
plain random crops (69% +- 20% validation top-1 after 1000 steps over 3 seeds); the demo, on the same
kind of data, stayed near the 50% an order-blind model is capped at. Its loader differs in two ways:
a random frame inside each of the 8 segments (the TSN/SSv2 sampling) and, until then, a random
resized crop of 0.6-1 of the area with aspect 3/4-4/3. This benchmark trains the demo's model (its
preset and options) on the demo's dataset (its synth settings: 48 training videos per class) in the
science check's plain loop, with the demo's batch, learning rate and warm-up for 800 steps (the
demo's budget when it was found to learn slowly), through the loader's own FrameSampler and
TrainTransform, for each combination of frame offsets (segment centre / random) and crop (random
resized 0.6-1 / the paper's scale jitter at 0.875-1), and validates as the pipeline does (centre
frames, the whole frame at the crop size). One process per run, two at a time:

    python -m benchmarks.demo_augmentation --seeds 2          # writes benchmarks/results/
"""

from __future__ import annotations

import multiprocessing
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from benchmarks.results import BenchmarkResult, Table, fmt
from benchmarks.seed_spread import by_label, final, plot_curves, run_and_write, seeds_parser
from benchmarks.temporal_reasoning import Budget, centre_frames, decode_videos, fit
from benchmarks.timing import torch_threads
from vidtx.clips.sampling import FrameSampler
from vidtx.config import PipelineConfig, load_config
from vidtx.data.transforms import TrainTransform
from vidtx.log import setup_logging
from vidtx.model_factory import build_model
from vidtx.shard.synthetic import CLASSES, generate_dataset

DEMO_CONFIG = Path(__file__).parent.parent / "configs" / "experiments" / "demo.yaml"
CROPS = {  # label -> DataConfig fields
    "random resized 0.6-1": {"crop": "random_resized", "scale_range": (0.6, 1.0)},
    "scale jitter 0.875-1": {"crop": "scale_jitter", "scale_jitter": (0.875, 1.0)},
}
OFFSETS = ("centre", "random")  # the frame inside each segment
STEPS = 800  # the demo's budget when its slow learning was found
QUICK_STEPS = 200


@dataclass(frozen=True)
class Variant:
    crop: str
    offsets: str
    seed: int

    @property
    def label(self) -> str:
        return f"{self.offsets} frame, {self.crop}"


def train_variant(variant: Variant, data_file: Path, config: PipelineConfig, budget: Budget) -> dict:
    """Train the demo's model with one crop/offset setting from its seed, on one thread."""
    train_videos, train_labels, val_clips, val_labels = torch.load(data_file)
    data = config.data.model_copy(update=CROPS[variant.crop])
    sampler, transform = FrameSampler(data.sampling, data.num_frames), TrainTransform.from_config(data)
    rng = np.random.default_rng(variant.seed)  # the batches, frames and crops

    def draw_batch() -> tuple[torch.Tensor, torch.Tensor]:
        picked = rng.integers(0, len(train_videos), budget.batch_size)
        clips = []
        for index in picked:
            video = train_videos[index]  # (frames, H, W, 3)
            if variant.offsets == "random":
                frames = sampler.train(len(video), rng)
            else:
                frames = sampler.test(len(video))[0]
            clips.append(transform(video[frames], rng))  # (T, crop, crop, 3)
        return torch.stack(clips), train_labels[torch.from_numpy(picked)]

    with torch_threads(1):
        torch.manual_seed(variant.seed)  # the initial weights
        model = build_model(
            config.model, num_classes=len(CLASSES), num_frames=data.num_frames, img_size=data.crop_size
        )
        trained = fit(model, draw_batch, (val_clips, val_labels), budget, variant.label, variant.seed)
    return {**trained, "crop": variant.crop, "offsets": variant.offsets}


def demo_budget(config: PipelineConfig, steps: int) -> Budget:
    """The demo's data, global batch, learning rate and warm-up, for `steps` steps."""
    train = config.train
    return Budget(
        classes=CLASSES,
        train_videos=config.synth.videos_per_class["train"],
        val_videos=config.synth.videos_per_class["val"],
        video_size=config.synth.size,
        crop=config.data.crop_size,
        steps=steps,
        batch_size=train.global_batch_size or train.micro_batch_size * train.num_workers,
        eval_every=100,
        lr=train.optimizer.lr,
        warmup_steps=train.schedule.warmup_steps,
    )


def measure(config: PipelineConfig, budget: Budget, chosen: list[Variant], work: Path) -> list[dict]:
    """Generate the demo's dataset and decode it once, then train every variant, two at a time."""
    root = generate_dataset(config.synth.model_copy(update={"output": work / "videos"})).parent
    data = config.data
    val_videos, val_labels = decode_videos(root, "val", (data.crop_size, data.crop_size))  # square videos
    val_clips = centre_frames(val_videos, FrameSampler(data.sampling, data.num_frames))
    train = decode_videos(root, "train", (data.short_side, data.short_side))
    data_file = work / "videos.pt"
    torch.save((*train, val_clips, val_labels), data_file)
    context = multiprocessing.get_context("spawn")
    count = len(chosen)
    with ProcessPoolExecutor(max_workers=2, mp_context=context, initializer=setup_logging) as pool:
        return list(pool.map(train_variant, chosen, [data_file] * count, [config] * count, [budget] * count))


def run(output_dir: Path, quick: bool = False, seeds: int = 2) -> BenchmarkResult:
    config = load_config(DEMO_CONFIG)
    budget = demo_budget(config, QUICK_STEPS if quick else STEPS)
    chosen = [
        Variant(crop, offsets, seed)
        for seed in range(1 if quick else seeds)
        for crop in CROPS
        for offsets in OFFSETS
    ]
    with tempfile.TemporaryDirectory() as tmp:
        results = measure(config, budget, chosen, Path(tmp))
    return report(results, config, budget, quick, output_dir)


def report(
    results: list[dict], config: PipelineConfig, budget: Budget, quick: bool, output_dir: Path
) -> BenchmarkResult:
    output_dir.mkdir(parents=True, exist_ok=True)
    figure = "demo_augmentation.png"
    plot_curves(results, output_dir / figure)
    grouped = by_label(results)
    rows = [
        [
            label,
            str(len(runs)),
            fmt(float(np.mean([run["curve"][-1]["train_loss"] for run in runs]))),
            str(final(runs, "val_top1")),
            str(final(runs, "val_direction")),
        ]
        for label, runs in grouped.items()
    ]
    table = Table(
        "The demo's model and data after the demo's steps: mean ± standard deviation (worst-best seed)",
        ["training frames and crop", "seeds", "final train loss (mean)", "val top-1", "direction accuracy"],
        rows,
    )
    best = max(grouped, key=lambda label: final(grouped[label], "val_top1").mean)
    return BenchmarkResult(
        name="demo_augmentation",
        title="Demo: what its training augmentation costs in learning frame order",
        summary=(
            f"configs/experiments/demo.yaml's model ({config.model.name}, options {config.model.options}) and "
            f"dataset ({budget.train_videos} training and {budget.val_videos} validation MP4s per class, "
            f"{budget.video_size} px), {budget.steps} steps of {budget.batch_size} clips at lr {budget.lr:g} "
            "in the science check's plain loop (AdamW, warm-up, cosine, clipping 1), one CPU thread per run; "
            "frames and crops drawn by the loader's FrameSampler and TrainTransform; validation on the centre "
            f"frames, whole frame at {config.data.crop_size} px, as the pipeline validates."
        ),
        inputs={"config": str(DEMO_CONFIG), "budget": budget.__dict__, "quick": quick},
        tables=[table],
        raw={"results": results},
        notes=[
            f"Highest mean validation top-1: {best} ({final(grouped[best], 'val_top1')}). Direction accuracy "
            "is the share of clips scored above their time-reversed partner class (50% = blind to order)."
        ],
        figures=[figure],
        quick=quick,
    )


def main(argv: list[str] | None = None) -> None:
    parser = seeds_parser("python -m benchmarks.demo_augmentation", __doc__, default=2)
    run_and_write(parser, argv, lambda args: run(args.output, seeds=args.seeds))


if __name__ == "__main__":
    main()
