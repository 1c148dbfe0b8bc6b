"""Issue 70, the science check: does VideoMAE pretraining pay off when labels are scarce?

On `benchmarks.moving_textures` (textured objects over textured backgrounds, all moving coherently; the
class is the object's shape and direction), VideoMAE's ViT (`videomae_tiny`) is pretrained as a masked
autoencoder (`vidtx.models.mae`: tube masks over 90% of the tokens, per-patch normalised targets, as
VideoMAE) on every training clip without labels, then:

- fine-tuned on a labelled, class-balanced 10% of them by VideoMAE's recipe (its final norm unused,
  mean pooling into a new fc_norm, layer-wise lr decay 0.75), against the same fine-tune from random
  weights without the decay (the control), and that control on every label (the upper bound: what the
  model learns of the task at this size);
- probed: a linear classifier on the frozen encoder's features (the mean of its final tokens) of the
  same labelled clips, against the probe of the same encoder at its initialisation, and the probe
  measured along the pretraining (what it learns, step by step).

Seed s sets the initial weights (shared by every arm and the pretraining's encoder), the masks, and the
batches and crops (both fine-tunes of a seed draw the same batches). A plain PyTorch loop, one torch
thread per process, two processes at a time:

    python -m benchmarks.pretraining_gain --seeds 3      # writes benchmarks/results/
    python -m benchmarks.pretraining_gain --quick        # a few steps on a few clips, to try the path
"""

from __future__ import annotations

import logging
import multiprocessing
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.moving_textures import CLASSES, make_split
from benchmarks.results import BenchmarkResult
from benchmarks.seed_spread import run_and_write, seeds_parser
from benchmarks.temporal_reasoning import model_input, optimizer_step, random_crops
from benchmarks.timing import torch_threads
from vidtx.config import OptimizerConfig, ScheduleConfig
from vidtx.log import setup_logging
from vidtx.models import create_model
from vidtx.models.mae import MaskedAutoencoder, encoder_state
from vidtx.models.masking import sample_mask
from vidtx.train.optim import build_optimizer, build_scheduler

log = logging.getLogger(__name__)

PRESET, FRAMES = "videomae_tiny", 8  # width 96, depth 4, 4 heads, 8 px patches, 2-frame tubelets
SCRATCH, PRETRAINED = "fine-tune, from scratch", "fine-tune, MAE-pretrained"
EVERY_LABEL = "fine-tune, from scratch, every label"  # the upper bound: is the task learnable at this size?
PROBE_SCRATCH, PROBE_PRETRAINED = "linear probe, random encoder", "linear probe, MAE-pretrained"
GOAL = 0.05  # pretrained minus scratch, validation top-1, for the probe and the fine-tune
FIGURE = "pretraining_gain.png"


@dataclass(frozen=True)
class Setup:
    train_videos: int = 100  # per class: all unlabeled for the pretraining
    val_videos: int = 24
    video_size: int = 64
    crop: int = 56
    labelled: float = 0.1  # the fraction of each class's training clips with labels
    batch_size: int = 16
    pretrain_steps: int = 5000
    pretrain_lr: float = 1e-3
    # VideoMAE's is 0.9; at 56 px a frame has 49 patches and 0.9 leaves 5 (500 steps of either stayed at
    # the trivial loss here; by 2000, 0.75's had left it, 0.9's barely)
    mask_ratio: float = 0.75
    decoder: tuple[int, int, int] = (2, 64, 4)  # blocks, width, heads
    probes: int = 5  # the probe measured this many times along the pretraining (and at its start)
    finetune_steps: int = 300
    finetune_lr: float = 1e-3
    layer_decay: float = 0.75  # VideoMAE's, for the pretrained arm
    eval_every: int = 50

    @property
    def labelled_per_class(self) -> int:
        return max(1, round(self.labelled * self.train_videos))


FULL = Setup()
QUICK = Setup(train_videos=10, val_videos=4, pretrain_steps=6, probes=2, finetune_steps=6, eval_every=3)


def new_model(setup: Setup, seed: int, final_norm: bool) -> torch.nn.Module:
    """Seed's initial weights: the same in every arm (a pretraining's encoder ends in its final norm)."""
    torch.manual_seed(seed)
    return create_model(PRESET, img_size=setup.crop, num_classes=len(CLASSES), final_norm=final_norm)


def centred(clips: torch.Tensor, crop: int) -> torch.Tensor:
    offset = (clips.shape[-2] - crop) // 2
    return clips[:, :, offset : offset + crop, offset : offset + crop]


def labelled_subset(data: dict, setup: Setup, every_label: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The first clips of each class with their labels (all of them: `every_label`): the same for every
    run."""
    labels = data["train_labels"]
    if every_label:
        return data["train"], labels
    subset = torch.cat([(labels == c).nonzero()[: setup.labelled_per_class, 0] for c in range(len(CLASSES))])
    return data["train"][subset], labels[subset]


@torch.no_grad()
def top1(model: torch.nn.Module, clips: torch.Tensor, labels: torch.Tensor, crop: int) -> float:
    model.eval()
    logits = torch.cat([model(model_input(centred(batch, crop))) for batch in clips.split(64)])
    model.train()
    return (logits.argmax(1) == labels).float().mean().item()


@torch.no_grad()
def probe(encoder: torch.nn.Module, data: dict, setup: Setup) -> float:
    """A linear classifier on the frozen encoder's clip features (4 random crops of each labelled clip;
    features standardised), trained to convergence; its validation top-1 (centre crops)."""
    clips, labels = labelled_subset(data, setup)
    generator = torch.Generator().manual_seed(0)
    encoder.eval()

    def features(batch: torch.Tensor) -> torch.Tensor:
        return torch.cat([encoder.forward_features(model_input(part)) for part in batch.split(64)])

    train = torch.cat([features(random_crops(clips, setup.crop, generator)) for _ in range(4)])
    val = features(centred(data["val"], setup.crop))
    encoder.train()
    mean, std = train.mean(0), train.std(0) + 1e-6
    train, val, targets = (train - mean) / std, (val - mean) / std, labels.repeat(4)
    with torch.enable_grad():
        head = torch.nn.Linear(train.shape[1], len(CLASSES))
        optimizer = torch.optim.AdamW(head.parameters(), lr=0.01, weight_decay=0.01)
        for _ in range(300):  # full batch
            loss = F.cross_entropy(head(train), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return (head(val).argmax(1) == data["val_labels"]).float().mean().item()


@torch.no_grad()
def reconstruction_loss(mae: MaskedAutoencoder, clips: torch.Tensor, crop: int) -> float:
    """The MSE over the hidden patches of centre-cropped validation clips, the same masks every call
    (predicting each patch's mean, 0 for normalised targets, scores about 1)."""
    generator, total = torch.Generator().manual_seed(0), 0.0
    mae.eval()
    for batch in model_input(centred(clips, crop)).split(64):
        mask = sample_mask(len(batch), mae.steps, mae.patches, mae.mask_ratio, "tube", generator)
        total += mae(batch, mask).loss.item() * len(batch)
    mae.train()
    return total / len(clips)


def pretrain(seed: int, data_file: Path, setup: Setup, work: Path) -> dict:
    """Pretrain seed's encoder on every training clip, labels unused, probing it along the way; writes
    its weights."""
    start = time.perf_counter()
    with torch_threads(1):
        data = torch.load(data_file)
        depth, width, heads = setup.decoder
        mae = MaskedAutoencoder(new_model(setup, seed, final_norm=True), mask_ratio=setup.mask_ratio,
                                decoder_depth=depth, decoder_dim=width, decoder_heads=heads)  # fmt: skip
        generator = torch.Generator().manual_seed(seed)  # the masks, batches and crops
        adamw = OptimizerConfig(name="adamw", lr=setup.pretrain_lr, betas=(0.9, 0.95), weight_decay=0.05)
        optimizer = build_optimizer(mae, adamw)
        schedule = ScheduleConfig(warmup_steps=setup.pretrain_steps // 20, min_lr_ratio=0.01)
        scheduler = build_scheduler(optimizer, schedule, setup.pretrain_steps)
        every = max(1, setup.pretrain_steps // setup.probes)
        curve, losses = [], []
        for step in range(setup.pretrain_steps + 1):
            if step % every == 0 or step == setup.pretrain_steps:
                point = {"step": step, "val_reconstruction": reconstruction_loss(mae, data["val"], setup.crop),
                         "probe_top1": probe(mae.encoder, data, setup),
                         "train_loss": statistics.fmean(losses[-every:]) if losses else None}  # fmt: skip
                curve.append(point)
                log.info("pretraining seed %d step %d: %s", seed, step, point)
            if step == setup.pretrain_steps:
                break
            batch = torch.randint(0, len(data["train"]), (setup.batch_size,), generator=generator)
            clips = random_crops(data["train"][batch], setup.crop, generator)
            mask = sample_mask(len(batch), mae.steps, mae.patches, mae.mask_ratio, "tube", generator)
            loss = mae(model_input(clips), mask).loss
            losses.append(optimizer_step(loss, mae, optimizer, scheduler))
        encoder_file = work / f"encoder-{seed}.pt"
        torch.save(encoder_state(mae.state_dict()), encoder_file)
    return {
        "seed": seed,
        "encoder": str(encoder_file),
        "curve": curve,
        "seconds": time.perf_counter() - start,
    }


def finetune(label: str, seed: int, data_file: Path, setup: Setup, encoder_file: Path | None) -> dict:
    """Fine-tune seed's model on the labelled subset (on every clip: `EVERY_LABEL`): from random weights, or from the pretrained
    encoder by VideoMAE's recipe (its final norm unused, a new fc_norm and head, layer-wise lr decay)."""
    start = time.perf_counter()
    with torch_threads(1):
        data = torch.load(data_file)
        clips, labels = labelled_subset(data, setup, every_label=label == EVERY_LABEL)
        model = new_model(setup, seed, final_norm=False)
        if encoder_file is not None:
            weights = {
                k: v for k, v in torch.load(encoder_file).items() if not k.startswith(("head.", "norm."))
            }
            missing, unexpected = model.load_state_dict(weights, strict=False)
            if unexpected or not all(name.startswith(("head.", "fc_norm.")) for name in missing):
                raise ValueError(f"the pretrained encoder does not fit: {missing=}, {unexpected=}")
        decay = setup.layer_decay if encoder_file is not None else 1.0
        adamw = OptimizerConfig(name="adamw", lr=setup.finetune_lr, weight_decay=0.05, layer_decay=decay)
        optimizer = build_optimizer(model, adamw)
        schedule = ScheduleConfig(warmup_steps=setup.finetune_steps // 10, min_lr_ratio=0.01)
        scheduler = build_scheduler(optimizer, schedule, setup.finetune_steps)
        generator = torch.Generator().manual_seed(seed)  # the batches and crops: the same in both arms
        curve, losses = [], []
        for step in range(1, setup.finetune_steps + 1):
            batch = torch.randint(0, len(clips), (setup.batch_size,), generator=generator)
            loss = F.cross_entropy(
                model(model_input(random_crops(clips[batch], setup.crop, generator))), labels[batch]
            )
            losses.append(optimizer_step(loss, model, optimizer, scheduler))
            if step % setup.eval_every == 0:
                accuracy = top1(model, data["val"], data["val_labels"], setup.crop)
                curve.append({"step": step, "train_loss": statistics.fmean(losses[-setup.eval_every :]),
                              "val_top1": accuracy})  # fmt: skip
                log.info("%s seed %d step %d: %s", label, seed, step, curve[-1])
    return {"label": label, "seed": seed, "curve": curve, "seconds": time.perf_counter() - start}


def probe_runs(pretrainings: list[dict]) -> list[dict]:
    """The probes as runs (a curve of one point, `val_top1`): of the encoder at its initialisation
    (the pretraining's first probe) and after the pretraining (its last)."""
    return [
        {
            "label": label,
            "seed": done["seed"],
            "curve": [{"step": point["step"], "val_top1": point["probe_top1"]}],
        }
        for done in pretrainings
        for label, point in ((PROBE_SCRATCH, done["curve"][0]), (PROBE_PRETRAINED, done["curve"][-1]))
    ]


def measure(setup: Setup, seeds: int, work: Path) -> tuple[list[dict], list[dict], dict]:
    """Make the clips once; pretrain each seed and fine-tune both arms, two processes at a time.
    Returns the fine-tunes and probes, the pretrainings and the timing."""
    start = time.perf_counter()
    train, train_labels = make_split(setup.train_videos, setup.video_size, FRAMES, seed=1)
    val, val_labels = make_split(setup.val_videos, setup.video_size, FRAMES, seed=2)
    data_file = work / "clips.pt"
    torch.save(
        {"train": train, "train_labels": train_labels, "val": val, "val_labels": val_labels}, data_file
    )
    prepared = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=2, mp_context=context, initializer=setup_logging) as pool:
        pending = [pool.submit(pretrain, seed, data_file, setup, work) for seed in range(seeds)]
        scratch = [
            pool.submit(finetune, arm, seed, data_file, setup, None)
            for arm in (SCRATCH, EVERY_LABEL)
            for seed in range(seeds)
        ]
        pretrainings, tuned = [], []
        for future in as_completed(pending):  # a seed's pretrained fine-tune is queued when it is pretrained
            pretrainings.append(done := future.result())
            tuned.append(
                pool.submit(finetune, PRETRAINED, done["seed"], data_file, setup, Path(done["encoder"]))
            )
        runs = [future.result() for future in scratch + tuned]
    timing = {"data_seconds": prepared - start, "training_wall_seconds": time.perf_counter() - prepared}
    pretrainings.sort(key=lambda done: done["seed"])
    order = [SCRATCH, PRETRAINED, EVERY_LABEL, PROBE_SCRATCH, PROBE_PRETRAINED]
    runs = sorted(runs + probe_runs(pretrainings), key=lambda run: (order.index(run["label"]), run["seed"]))
    return runs, pretrainings, timing


def run(output_dir: Path, quick: bool = False, seeds: int = 3, setup: Setup | None = None) -> BenchmarkResult:
    """Pretrain, fine-tune and probe seeds 0..`seeds`-1 (default setup: QUICK or FULL); report them."""
    from benchmarks.pretraining_gain_report import report

    setup = setup or (QUICK if quick else FULL)
    with tempfile.TemporaryDirectory() as tmp:
        runs, pretrainings, timing = measure(setup, seeds, Path(tmp))
    return report(runs, pretrainings, setup, timing, quick, output_dir)


def main(argv: list[str] | None = None) -> None:
    parser = seeds_parser("python -m benchmarks.pretraining_gain", __doc__, default=3)
    parser.add_argument("--quick", action="store_true", help="a few steps on a few clips")
    run_and_write(parser, argv, lambda args: run(args.output, quick=args.quick, seeds=args.seeds))


if __name__ == "__main__":
    main()
