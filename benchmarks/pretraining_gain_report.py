"""The table, findings and figure of `benchmarks.pretraining_gain`."""

from __future__ import annotations

import statistics
from dataclasses import asdict
from pathlib import Path

from benchmarks.moving_textures import CLASSES
from benchmarks.pretraining_gain import (
    EVERY_LABEL,
    FIGURE,
    GOAL,
    PRESET,
    PRETRAINED,
    PROBE_PRETRAINED,
    PROBE_SCRATCH,
    SCRATCH,
    Setup,
)  # fmt: skip
from benchmarks.results import BenchmarkResult, Table, fmt
from benchmarks.seed_spread import Spread, by_label, final, paired


def goal_line(name: str, runs: list[dict], pretrained: str, scratch: str) -> str:
    grouped = by_label(runs)
    difference = paired(grouped[pretrained], grouped[scratch], "val_top1")
    low = difference.interval[0]
    met = difference.mean >= GOAL and low > 0
    short = "" if met else f" (missed by {max(GOAL - difference.mean, 0):.1%} of the mean"
    short += "" if met or low > 0 else ", and the interval reaches 0 or below"
    return (
        f"Goal, {name}: pretrained minus scratch {difference}; asked: >= +{GOAL:.0%} with the interval above 0: "
        + ("met." if met else f"missed{short}).")
    )


def probe_table(pretrainings: list[dict]) -> Table:
    """The probe and the reconstruction loss along the pretraining, means over the seeds."""
    rows = []
    for index, point in enumerate(pretrainings[0]["curve"]):
        at = [done["curve"][index] for done in pretrainings]
        losses = [p["train_loss"] for p in at if p["train_loss"] is not None]
        rows.append([
            str(point["step"]),
            fmt(statistics.fmean(losses)) if losses else "",
            fmt(statistics.fmean(p["val_reconstruction"] for p in at)),
            str(Spread(tuple(p["probe_top1"] for p in at))),
        ])  # fmt: skip
    columns = ["pretraining step", "train loss (last stretch)", "val reconstruction loss", "probe val top-1"]
    return Table(
        "The pretraining step by step: reconstruction and what a linear probe reads from it", columns, rows
    )


def findings(runs: list[dict], pretrainings: list[dict], setup: Setup, timing: dict) -> list[str]:
    first, last = (
        statistics.fmean(done["curve"][i]["val_reconstruction"] for done in pretrainings) for i in (0, -1)
    )
    unlabeled, labelled = setup.train_videos * len(CLASSES), setup.labelled_per_class * len(CLASSES)
    epochs = setup.pretrain_steps * setup.batch_size / unlabeled
    return [
        goal_line("fine-tune", runs, PRETRAINED, SCRATCH),
        goal_line("linear probe", runs, PROBE_PRETRAINED, PROBE_SCRATCH),
        f"Fine-tuning on {labelled} labelled clips ({setup.finetune_steps * setup.batch_size / labelled:.0f} "
        f"epochs of them): MAE-pretrained {final(by_label(runs)[PRETRAINED], 'val_top1')}, from scratch "
        f"{final(by_label(runs)[SCRATCH], 'val_top1')} validation top-1 (chance {1 / len(CLASSES):.1%}). "
        f"With every label ({unlabeled} clips, the same steps) from scratch: "
        f"{final(by_label(runs)[EVERY_LABEL], 'val_top1')}, what this model learns of the task at this size.",
        f"Pretraining ({setup.pretrain_steps} steps of {setup.batch_size} clips, {epochs:.3g} epochs of the "
        f"{unlabeled} unlabeled clips): the validation reconstruction loss went from {fmt(first)} to "
        f"{fmt(last)} (per-patch normalised targets: predicting each patch's mean scores about 1); the "
        "probe along the way is the second table.",
        f"Wall-clock, one thread per process, two processes: making the clips {timing['data_seconds']:.0f} s, "
        f"a pretraining {statistics.fmean(p['seconds'] for p in pretrainings):.0f} s (with its probes), a "
        f"fine-tune {statistics.fmean(r['seconds'] for r in runs if 'seconds' in r):.0f} s (means), all "
        f"{timing['training_wall_seconds']:.0f} s.",
    ]


def plot(runs: list[dict], pretrainings: list[dict], path: Path) -> None:
    """Left: the fine-tunes' validation top-1; right: the probe along the pretraining."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label in (SCRATCH, PRETRAINED, EVERY_LABEL):
        arm = by_label(runs)[label]
        steps = [point["step"] for point in arm[0]["curve"]]
        per_step = list(zip(*([p["val_top1"] for p in run["curve"]] for run in arm), strict=True))
        left.plot(steps, [statistics.fmean(v) for v in per_step], marker=".", label=label)
    steps = [point["step"] for point in pretrainings[0]["curve"]]
    per_step = list(zip(*([p["probe_top1"] for p in done["curve"]] for done in pretrainings), strict=True))
    right.plot(steps, [statistics.fmean(v) for v in per_step], marker="o", label="linear probe")
    for axis, title, x in ((left, "fine-tune: validation top-1", "fine-tuning step"),
                           (right, "linear probe: validation top-1", "pretraining step")):  # fmt: skip
        axis.set(title=title, xlabel=x, ylim=(0, 1.02))
        axis.axhline(1 / len(CLASSES), color="grey", linestyle="--", linewidth=1)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def report(
    runs: list[dict], pretrainings: list[dict], setup: Setup, timing: dict, quick: bool, output_dir: Path
) -> BenchmarkResult:
    output_dir.mkdir(parents=True, exist_ok=True)
    plot(runs, pretrainings, output_dir / FIGURE)
    grouped = by_label(runs)
    baseline = {PRETRAINED: SCRATCH, PROBE_PRETRAINED: PROBE_SCRATCH}
    rows = [
        [label, str(len(arm)), str(final(arm, "val_top1")),
         str(paired(arm, grouped[baseline[label]], "val_top1")) if label in baseline else ""]
        for label, arm in grouped.items()
    ]  # fmt: skip
    columns = ["arm", "seeds", "val top-1", "pretrained minus scratch, per seed"]
    depth, width, heads = setup.decoder
    return BenchmarkResult(
        name="pretraining_gain",
        title="Science check: VideoMAE pretraining with 10% of the labels",
        summary=(
            f"`benchmarks.moving_textures`: {len(CLASSES)} classes (an object's shape x its direction), textured "
            f"objects over textured backgrounds that pan, {setup.train_videos} training and {setup.val_videos} "
            f"validation clips per class ({setup.video_size} px, {8} frames), random {setup.crop} px crops for "
            f"training, centre crops for validation. Model: {PRESET} (VideoMAE's ViT: width 96, depth 4, 4 heads, "
            f"8 px patches, 2-frame tubelets). Pretraining: masked autoencoder, tube masks hiding "
            f"{setup.mask_ratio:.0%} of the tokens, per-patch normalised targets (VideoMAE's), decoder of {depth} "
            f"blocks {width} wide, {heads} heads, on every training clip without labels, {setup.pretrain_steps} "
            f"steps of {setup.batch_size} clips, AdamW lr {setup.pretrain_lr:g} (betas 0.9, 0.95, weight decay "
            f"0.05, cosine). Fine-tuning: the first {setup.labelled_per_class} training clips of each class with "
            f"labels, {setup.finetune_steps} steps of {setup.batch_size} clips, AdamW lr {setup.finetune_lr:g} "
            f"(weight decay 0.05, cosine); the pretrained arm by VideoMAE's recipe (final norm unused, mean "
            f"pooling into a new fc_norm, layer-wise lr decay {setup.layer_decay}), the control from random "
            "weights without decay, and the control on every label (the upper bound). Linear probe: the frozen encoder's mean token feature of 4 random crops of "
            "each labelled clip, standardised, a linear classifier (AdamW, 300 full-batch steps); its control "
            "is the same encoder at initialisation. Seed s sets the initial weights of every arm, the masks, "
            "the batches and crops."
        ),
        inputs={"setup": asdict(setup), "quick": quick, "seeds": sorted({run["seed"] for run in runs})},
        tables=[
            Table("Validation top-1: mean ± standard deviation (worst-best seed)", columns, rows),
            probe_table(pretrainings),
        ],
        raw={"results": runs, "pretraining": pretrainings, "timing": timing},
        notes=findings(runs, pretrainings, setup, timing),
        figures=[FIGURE],
        quick=quick,
    )
