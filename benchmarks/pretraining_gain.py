"""Issue 59, the science check: does masked-autoencoder pretraining help when labels are scarce?

On the synthetic dataset of `benchmarks.temporal_reasoning` (classes in time-reversed pairs: only frame
order tells a clip from its partner), X-ViT tiny is pretrained as a masked autoencoder (`vidtx.models.mae`:
tube masks over 90% of the tokens, a small decoder, MSE of the pixels, not normalised per patch: see the
summary) on all training videos without labels, then fine-tuned on a labelled, class-balanced 10% of
them; the control is the same fine-tuning (`temporal_reasoning.fit`: model, subset, steps, optimizer,
batches) from random weights. Both are scored on the validation split (top-1, direction accuracy). Seed
s sets the initial weights (shared by both arms and the pretraining's encoder), the masks, and the
batches and crops (both arms of a seed draw the same fine-tune batches).
A plain PyTorch loop, one torch thread per process, two processes at a time:

    python -m benchmarks.pretraining_gain --seeds 3      # writes benchmarks/results/
    python -m benchmarks.pretraining_gain --quick        # a few steps on a few videos, to try the path
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

from benchmarks.results import BenchmarkResult, Table, fmt
from benchmarks.seed_spread import Spread, by_label, final, paired, plot_curves, run_and_write, seeds_parser
from benchmarks.temporal_reasoning import TIE_MARGIN, Budget, decode_split, fit, model_input, random_crops
from benchmarks.timing import torch_threads
from vidtx.config import OptimizerConfig, ScheduleConfig, SynthConfig
from vidtx.log import setup_logging
from vidtx.models import create_model
from vidtx.models.mae import MaskedAutoencoder, encoder_state
from vidtx.models.masking import sample_mask, visible_count
from vidtx.shard.synthetic import CLASSES, generate_dataset
from vidtx.train.optim import build_optimizer, build_scheduler

log = logging.getLogger(__name__)

PRESET, FRAMES = "xvit_tiny", 8  # temporal_reasoning's X-ViT (mix 1/2, attention head), 8 uniform frames
SCRATCH, PRETRAINED = "from scratch", "MAE-pretrained"
FIGURE = "pretraining_gain.png"


@dataclass(frozen=True)
class Setup:
    finetune: Budget  # the data (train_videos: all of them, per class), crops and the fine-tuning
    pretrain_steps: int
    labelled: float = 0.1  # the fraction of each class's training videos the fine-tune sees
    pretrain_lr: float = 1e-3
    pretrain_warmup: int = 50
    mask_ratio: float = 0.9
    decoder: tuple[int, int, int] = (2, 64, 4)  # blocks, width, heads (VideoMAE's ViT-S: 4, 192, 3)

    @property
    def labelled_per_class(self) -> int:
        return max(1, round(self.labelled * self.finetune.train_videos))


FULL = Setup(Budget(CLASSES, 100, 24, 64, 56, 200, 16, 25), pretrain_steps=1200)
QUICK = Setup(Budget(CLASSES, 20, 4, 64, 56, 6, 8, 3, warmup_steps=2), pretrain_steps=6, pretrain_warmup=2)


def new_model(setup: Setup, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)  # the initial weights: the same in both arms and the pretraining's encoder
    return create_model(PRESET, img_size=setup.finetune.crop, num_classes=len(CLASSES))


def reconstruction_loss(mae: MaskedAutoencoder, clips: torch.Tensor, crop: int) -> tuple[float, float]:
    """The MSE over the hidden patches of centre-cropped clips (the same masks every call), and the MSE of
    knowing each hidden patch's mean colour and nothing finer."""
    offset, generator = (clips.shape[-2] - crop) // 2, torch.Generator().manual_seed(0)
    total = torch.zeros(2)
    mae.eval()
    with torch.no_grad():
        for batch in model_input(clips[:, :, offset : offset + crop, offset : offset + crop]).split(64):
            mask = sample_mask(len(batch), mae.steps, mae.patches, mae.mask_ratio, "tube", generator)
            targets = mae.targets(batch).unflatten(-1, (-1, 3))  # (B, tokens, pixels, channels)
            spread = (targets - targets.mean(dim=-2, keepdim=True)).pow(2).mean(dim=(-2, -1))
            total += torch.tensor([mae(batch, mask).loss.item(), spread[mask].mean().item()]) * len(batch)
    mae.train()
    return (total[0] / len(clips)).item(), (total[1] / len(clips)).item()


def pretrain(seed: int, data_file: Path, setup: Setup, work: Path) -> dict:
    """Pretrain seed's encoder on every training clip, labels unused; writes its weights (head left out)."""
    start = time.perf_counter()
    with torch_threads(1):
        train_clips, _, val_clips, _ = torch.load(data_file)
        decoder = dict(zip(("decoder_depth", "decoder_dim", "decoder_heads"), setup.decoder, strict=True))
        # raw pixels: per patch normalised (VideoMAE), this data's noisy backgrounds are unpredictable
        options = {"mask_ratio": setup.mask_ratio, "norm_pix_loss": False, **decoder}
        mae = MaskedAutoencoder(new_model(setup, seed), masking="tube", **options)
        generator = torch.Generator().manual_seed(seed)  # the masks, batches and crops
        adamw = OptimizerConfig(name="adamw", lr=setup.pretrain_lr, weight_decay=0.05)
        optimizer = build_optimizer(mae, adamw)
        schedule = ScheduleConfig(warmup_steps=setup.pretrain_warmup, min_lr_ratio=0.05)
        scheduler = build_scheduler(optimizer, schedule, setup.pretrain_steps)
        budget, every = setup.finetune, max(1, setup.pretrain_steps // 10)
        before, mean_colour = reconstruction_loss(mae, val_clips, budget.crop)
        curve, losses = [], []
        for step in range(1, setup.pretrain_steps + 1):
            batch = torch.randint(0, len(train_clips), (budget.batch_size,), generator=generator)
            clips = random_crops(train_clips[batch], budget.crop, generator)
            mask = sample_mask(len(batch), mae.steps, mae.patches, mae.mask_ratio, "tube", generator)
            loss = mae(model_input(clips), mask).loss
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(mae.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
            if step % every == 0:
                curve.append({"step": step, "train_loss": statistics.fmean(losses[-every:])})
                log.info("pretraining seed %d step %d: loss %.3f", seed, step, curve[-1]["train_loss"])
        weights = {k: v for k, v in encoder_state(mae.state_dict()).items() if not k.startswith("head.")}
        encoder_file = work / f"encoder-{seed}.pt"
        torch.save(weights, encoder_file)
        after, _ = reconstruction_loss(mae, val_clips, budget.crop)
    return {
        "seed": seed,
        "encoder": str(encoder_file),
        "curve": curve,
        "val_reconstruction": {"before": before, "after": after, "patch_mean_colour": mean_colour},
        "patches_per_frame": mae.patches,
        "visible_per_frame": visible_count("tube", 1, mae.patches, setup.mask_ratio),
        "seconds": time.perf_counter() - start,
    }


def finetune(label: str, seed: int, data_file: Path, setup: Setup, encoder_file: Path | None) -> dict:
    """Fine-tune seed's model on the labelled subset, from the pretrained encoder or from scratch."""
    start = time.perf_counter()
    with torch_threads(1):
        train_clips, train_labels, val_clips, val_labels = torch.load(data_file)
        # the labelled subset: the first videos of each class in annotation order, the same for every run
        per_class = setup.labelled_per_class
        subset = torch.cat([(train_labels == c).nonzero()[:per_class, 0] for c in range(len(CLASSES))])
        clips, labels = train_clips[subset], train_labels[subset]
        model = new_model(setup, seed)
        if encoder_file is not None:
            missing, unexpected = model.load_state_dict(torch.load(encoder_file), strict=False)
            if unexpected or not all(name.startswith("head.") for name in missing):
                raise ValueError(f"the pretrained encoder does not fit: {missing=}, {unexpected=}")
        generator = torch.Generator().manual_seed(seed)  # the batches and crops: the same in both arms
        budget = setup.finetune

        def draw_batch() -> tuple[torch.Tensor, torch.Tensor]:
            batch = torch.randint(0, len(clips), (budget.batch_size,), generator=generator)
            return random_crops(clips[batch], budget.crop, generator), labels[batch]

        trained = fit(model, draw_batch, (val_clips, val_labels), budget, label, seed)
    return {**trained, "seconds": time.perf_counter() - start}


def measure(setup: Setup, seeds: int, work: Path) -> tuple[list[dict], list[dict], dict]:
    """Generate and decode the data once; pretrain each seed and fine-tune both arms, two processes at a
    time. Returns the fine-tunes, the pretrainings and the timing."""
    start, budget = time.perf_counter(), setup.finetune
    videos = {"train": budget.train_videos, "val": budget.val_videos}  # of every class
    synth = SynthConfig(output=work / "videos", videos_per_class=videos, size=budget.video_size)
    root = generate_dataset(synth).parent
    data_file = work / "clips.pt"
    torch.save((*decode_split(root, "train", FRAMES), *decode_split(root, "val", FRAMES)), data_file)
    prepared = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=2, mp_context=context, initializer=setup_logging) as pool:
        pending = [pool.submit(pretrain, seed, data_file, setup, work) for seed in range(seeds)]
        scratch = [pool.submit(finetune, SCRATCH, seed, data_file, setup, None) for seed in range(seeds)]
        pretrainings, tuned = [], []
        for future in as_completed(pending):  # a seed's pretrained fine-tune is queued when it is pretrained
            pretrainings.append(done := future.result())
            encoder = Path(done["encoder"])
            tuned.append(pool.submit(finetune, PRETRAINED, done["seed"], data_file, setup, encoder))
        runs = [future.result() for future in scratch + tuned]
    timing = {"data_seconds": prepared - start, "training_wall_seconds": time.perf_counter() - prepared}
    in_order = sorted(runs, key=lambda run: (run["label"] != SCRATCH, run["seed"]))
    return in_order, sorted(pretrainings, key=lambda done: done["seed"]), timing


def findings(runs: list[dict], pretrainings: list[dict], setup: Setup, timing: dict) -> list[str]:
    """What the numbers say, gain or not, and what would change them."""
    grouped, budget, classes = by_label(runs), setup.finetune, len(CLASSES)
    scratch, pretrained = grouped[SCRATCH], grouped[PRETRAINED]
    difference = paired(pretrained, scratch, "val_top1")
    verdict = difference.verdict(TIE_MARGIN)
    gain = verdict == "differ" and difference.mean > 0
    outcome = {
        "differ": f"the interval excludes 0: {'a gain' if gain else 'a loss'}",
        "tie": f"the interval lies within ±{TIE_MARGIN:.0%}: no gain, a tie",
        "unsettled": f"the interval includes 0 and reaches beyond ±{TIE_MARGIN:.0%}: no gain shown",
    }[verdict]
    before, after, mean_colour = (
        statistics.fmean(p["val_reconstruction"][key] for p in pretrainings)
        for key in ("before", "after", "patch_mean_colour")
    )
    unlabeled, labelled = budget.train_videos * classes, setup.labelled_per_class * classes
    epochs = setup.pretrain_steps * budget.batch_size / unlabeled
    detail = "carry detail within the patches" if after < mean_colour else "are coarser than patch colours"
    return [
        f"After {budget.steps} fine-tuning steps on {labelled} labelled videos "
        f"({budget.steps * budget.batch_size / labelled:.0f} epochs of them), the MAE-pretrained model "
        f"reaches {final(pretrained, 'val_top1')} validation top-1, the model trained from scratch "
        f"{final(scratch, 'val_top1')} (chance {1 / classes:.1%}). Per seed, pretrained minus scratch: "
        f"{difference}; {outcome}. Direction accuracy: {final(pretrained, 'val_direction')} pretrained, "
        f"{final(scratch, 'val_direction')} from scratch (per seed "
        f"{paired(pretrained, scratch, 'val_direction')}).",
        f"Pretraining: the validation reconstruction loss (MSE over the hidden patches, the same masks) went "
        f"from {fmt(before)} at initialisation to {fmt(after)} after {setup.pretrain_steps} steps "
        f"({epochs:.3g} epochs of the {unlabeled} unlabeled videos), mean of {len(pretrainings)} seeds; "
        f"knowing each hidden patch's mean colour and nothing finer scores {fmt(mean_colour)}: the "
        f"reconstructions {detail}.",
        ("Pretraining gains at this budget. " if gain else "Pretraining shows no gain at this budget. ")
        + f"What would change it (not measured here): longer pretraining ({epochs:.3g} epochs here, "
        f"VideoMAE 800-4800), more unlabeled videos, higher resolution or smaller patches (at "
        f"{budget.crop} px and mask {setup.mask_ratio:g} each frame keeps "
        f"{pretrainings[0]['visible_per_frame']} of {pretrainings[0]['patches_per_frame']} patches), and a "
        "fine-tune suited to a pretrained encoder (layer-wise lr decay, VideoMAE 0.75, or a lower lr).",
        f"Wall-clock, one thread per process, two processes: data generation and decoding "
        f"{timing['data_seconds']:.0f} s, a pretraining "
        f"{statistics.fmean(p['seconds'] for p in pretrainings):.0f} s, a fine-tune "
        f"{statistics.fmean(r['seconds'] for r in runs):.0f} s (means), all training "
        f"{timing['training_wall_seconds']:.0f} s.",
    ]


def report(
    runs: list[dict], pretrainings: list[dict], setup: Setup, timing: dict, quick: bool, output_dir: Path
) -> BenchmarkResult:
    """The table, findings and the fine-tuning curves' figure (written to `output_dir`)."""
    output_dir.mkdir(parents=True, exist_ok=True)
    plot_curves(runs, output_dir / FIGURE)
    scratch = by_label(runs)[SCRATCH]
    rows = [
        [
            label,
            str(len(arm)),
            fmt(statistics.fmean(run["curve"][-1]["train_loss"] for run in arm)),
            str(final(arm, "val_top1")),
            str(Spread(tuple(max(point["val_top1"] for point in run["curve"]) for run in arm))),
            str(final(arm, "val_direction")),
            "" if label == SCRATCH else str(paired(arm, scratch, "val_top1")),
        ]
        for label, arm in by_label(runs).items()
    ]
    columns = ["arm", "seeds", "final train loss (mean)", "val top-1", "best val top-1", "direction accuracy"]
    title = "Validation accuracy after the same fine-tuning: mean ± standard deviation (worst-best seed)"
    budget, (depth, width, heads) = setup.finetune, setup.decoder
    return BenchmarkResult(
        name="pretraining_gain",
        title="Science check: masked-autoencoder pretraining with 10% of the labels",
        summary=(
            f"{len(CLASSES)} synthetic classes in time-reversed pairs, {budget.train_videos} training and "
            f"{budget.val_videos} validation MP4s per class ({budget.video_size} px; {FRAMES} uniform "
            f"frames), random {budget.crop} px crops for training, centre crop for validation. Model: "
            "xvit_tiny (width 96, depth 4, 4 heads, 8 px patches, half the key/value channels mixed, "
            f"temporal-attention head). Pretraining: masked autoencoder (tube masks hiding "
            f"{setup.mask_ratio:.0%} of the tokens, decoder of {depth} blocks {width} wide, {heads} heads, "
            "MSE of the pixels, not normalised per patch as in VideoMAE: normalised, this data's background "
            "patches, a gradient with static noise, become unit-variance noise that tube masks leave "
            f"unpredictable) on all {budget.train_videos} training videos per class, labels unused, "
            f"{setup.pretrain_steps} steps of {budget.batch_size} clips, AdamW lr {setup.pretrain_lr:g} "
            f"(weight decay 0.05, {setup.pretrain_warmup} warm-up steps, cosine). Fine-tuning, both arms "
            f"alike: the first {setup.labelled_per_class} training videos of each class with labels, "
            f"{budget.steps} steps of {budget.batch_size} clips, AdamW lr {budget.lr:g} (weight decay 0.05, "
            f"{budget.warmup_steps} warm-up steps, cosine); the pretrained arm loads the encoder, the head "
            "keeps the initialisation both arms share. One CPU thread per run; seed s sets the initial "
            "weights, the masks, the batches and crops (both arms of a seed draw the same fine-tune batches)."
        ),
        inputs={"setup": setup.__dict__, "quick": quick, "seeds": sorted({run["seed"] for run in runs})},
        tables=[Table(title, [*columns, "top-1 minus scratch, per seed"], rows)],
        raw={"results": runs, "pretraining": pretrainings, "timing": timing},
        notes=findings(runs, pretrainings, setup, timing),
        figures=[FIGURE],
        quick=quick,
    )


def run(output_dir: Path, quick: bool = False, seeds: int = 3, setup: Setup | None = None) -> BenchmarkResult:
    """Pretrain and fine-tune seeds 0..`seeds`-1 (default setup: QUICK or FULL) and report them."""
    setup = setup or (QUICK if quick else FULL)
    with tempfile.TemporaryDirectory() as tmp:
        runs, pretrainings, timing = measure(setup, seeds, Path(tmp))
    return report(runs, pretrainings, setup, timing, quick, output_dir)


def main(argv: list[str] | None = None) -> None:
    parser = seeds_parser("python -m benchmarks.pretraining_gain", __doc__, default=3)
    parser.add_argument("--quick", action="store_true", help="a few steps on a few videos")
    run_and_write(parser, argv, lambda args: run(args.output, quick=args.quick, seeds=args.seeds))


if __name__ == "__main__":
    main()
