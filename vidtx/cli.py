"""The `vidtx` command line. Every command takes the same configs as the Prefect flows."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from pydantic import BaseModel, ValidationError

from vidtx.config import ConfigError, dump_config, load_config
from vidtx.env import apply_defaults
from vidtx.log import setup_logging

if TYPE_CHECKING:
    from vidtx.eval.evaluate import EvalResult

app = typer.Typer(
    name="vidtx",
    help="Video transformer training pipeline: shard, train, evaluate, register.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
config_app = typer.Typer(help="Inspect configurations.", no_args_is_help=True)
app.add_typer(config_app, name="config")

ConfigArg = Annotated[
    Path, typer.Argument(help="Pipeline config YAML (see configs/).", exists=True, dir_okay=False)
]
OverridesOpt = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="Dotted override, e.g. --set train.optimizer.lr=0.05 (repeatable)."),
]
SectionT = TypeVar("SectionT", bound=BaseModel)


def fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def not_implemented(command: str) -> NoReturn:
    fail(f"`vidtx {command}` is not implemented yet")


@app.callback()
def _root(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False) -> None:
    apply_defaults()
    setup_logging("DEBUG" if verbose else "INFO")


@config_app.command("show")
def config_show(config: ConfigArg, overrides: OverridesOpt = None) -> None:
    """Print the resolved config (includes merged, overrides applied, defaults filled in)."""
    typer.echo(dump_config(load_config(config, overrides or [])), nl=False)


# --- data commands (synth, shard, inspect) --------------------------------------------------------

OptionalConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config", "-c", help="Pipeline YAML whose section is the base.", exists=True, dir_okay=False
    ),
]


def _section(model: type[SectionT], section: str, base: SectionT | None, updates: dict[str, Any]) -> SectionT:
    """`base` (from --config/--set) with the command-line options that were given laid over it."""
    data = base.model_dump() if base is not None else {}
    data |= {field: value for field, value in updates.items() if value is not None}
    try:
        return model.model_validate(data)
    except ValidationError as err:
        problems = (f"{section}.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise ConfigError("; ".join(problems)) from None


def _split_counts(pairs: list[str]) -> dict[str, int] | None:
    """['train=48', 'val=12'] -> {'train': 48, 'val': 12}."""
    if not pairs:
        return None
    counts = {}
    for pair in pairs:
        split, sep, count = pair.partition("=")
        if not sep or not count.strip().isdigit():
            raise ConfigError(f"--videos {pair}: expected SPLIT=COUNT, e.g. --videos train=48")
        counts[split.strip()] = int(count)
    return counts


@app.command()
def synth(
    output: Annotated[Path, typer.Argument(help="Output folder.")],
    videos: Annotated[
        list[str] | None, typer.Option(help="Videos per class in a split, SPLIT=COUNT (repeatable).")
    ] = None,
    classes: Annotated[
        list[str] | None, typer.Option("--class", help="A motion class to include (repeatable; default all).")
    ] = None,
    num_frames: Annotated[int | None, typer.Option(help="Frames per video.")] = None,
    size: Annotated[int | None, typer.Option(help="Frame height and width (even).")] = None,
    fps: Annotated[int | None, typer.Option(help="Frame rate.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed (same seed, same bytes).")] = None,
    config: OptionalConfigOpt = None,
    overrides: OverridesOpt = None,
) -> None:
    """Generate a synthetic dataset of MP4 videos whose class only the frame order tells."""
    from vidtx.config import SynthConfig
    from vidtx.data.synthetic import generate_dataset

    base = load_config(config, overrides or []).synth
    updates = {
        "output": output,
        "videos_per_class": _split_counts(videos or []),
        "classes": classes or None,
        "num_frames": num_frames,
        "size": size,
        "fps": fps,
        "seed": seed,
    }
    cfg = _section(SynthConfig, "synth", base, updates)
    try:
        annotations = generate_dataset(cfg)
    except ValueError as err:  # e.g. an unknown class name
        fail(str(err), code=1)
    typer.echo(f"wrote {annotations}")


@app.command()
def shard(
    source: Annotated[Path, typer.Argument(help="Dataset root or annotation file.")],
    output: Annotated[Path, typer.Argument(help="Output folder for shards and manifests.")],
    format: Annotated[
        str | None, typer.Option("--format", "-f", help="Source layout: folder, kinetics, ssv2 or csv.")
    ] = None,
    video_root: Annotated[Path | None, typer.Option(help="Where annotation formats find videos.")] = None,
    splits: Annotated[list[str] | None, typer.Option("--split", help="Split to shard (repeatable).")] = None,
    max_samples: Annotated[int | None, typer.Option(help="Samples per shard at most.")] = None,
    max_bytes: Annotated[int | None, typer.Option(help="Source bytes per shard at most.")] = None,
    processes: Annotated[int | None, typer.Option("--processes", "-j", help="Parallel processes.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seeds the sample order.")] = None,
    min_frames: Annotated[int | None, typer.Option(help="Reject shorter videos.")] = None,
    max_reject_fraction: Annotated[float | None, typer.Option(help="Fail above this bad fraction.")] = None,
    reencode: Annotated[
        bool | None, typer.Option("--reencode/--no-reencode", help="Re-encode (default: copy bytes).")
    ] = None,
    short_side: Annotated[int | None, typer.Option(help="Re-encode: short side in pixels.")] = None,
    fps: Annotated[float | None, typer.Option(help="Re-encode: frame rate.")] = None,
    max_seconds: Annotated[float | None, typer.Option(help="Re-encode: cut to this length.")] = None,
    keyframe_interval: Annotated[int | None, typer.Option(help="Re-encode: frames per GOP.")] = None,
    crf: Annotated[int | None, typer.Option(help="Re-encode: libx264 CRF.")] = None,
    config: OptionalConfigOpt = None,
    overrides: OverridesOpt = None,
) -> None:
    """Probe, filter and write a video dataset into WebDataset shards (any re-encode option turns
    re-encoding on)."""
    from vidtx.config import ReencodeConfig, ShardConfig
    from vidtx.data.shard import ShardingError, shard_dataset

    base = load_config(config, overrides or []).shard
    encode_options = {
        "short_side": short_side,
        "fps": fps,
        "max_seconds": max_seconds,
        "keyframe_interval": keyframe_interval,
        "crf": crf,
    }
    reencode_cfg = base.reencode
    if reencode or (reencode is None and any(v is not None for v in encode_options.values())):
        reencode_cfg = _section(ReencodeConfig, "shard.reencode", reencode_cfg, encode_options)
    updates = {
        "source": source,
        "output": output,
        "format": format,
        "video_root": video_root,
        "splits": splits or None,
        "max_samples_per_shard": max_samples,
        "max_bytes_per_shard": max_bytes,
        "processes": processes,
        "seed": seed,
        "min_frames": min_frames,
        "max_reject_fraction": max_reject_fraction,
    }
    cfg = _section(ShardConfig, "shard", base, updates)
    cfg = cfg.model_copy(update={"reencode": None if reencode is False else reencode_cfg})
    try:
        manifests = shard_dataset(cfg)
    except (ShardingError, FileNotFoundError, ValueError) as err:
        fail(str(err), code=1)
    for split, manifest in manifests.items():
        typer.echo(
            f"{split}: {manifest.num_samples} samples in {len(manifest.shards)} shards, "
            f"{len(manifest.rejects)} rejected -> {cfg.output / f'{split}.manifest.json'}"
        )


@app.command()
def inspect(
    shards: Annotated[Path, typer.Argument(help="Shard folder or a <split>.manifest.json in it.")],
    splits: Annotated[
        list[str] | None, typer.Option("--split", help="Split (repeatable; default all).")
    ] = None,
    videos: Annotated[int, typer.Option(help="Videos in the contact sheet (0: none).")] = 4,
    frames: Annotated[int, typer.Option(help="Frames per video in the contact sheet.")] = 8,
    output: Annotated[
        Path | None, typer.Option(help="Contact sheet folder (default: the shard folder).")
    ] = None,
) -> None:
    """Summarise sharded splits (counts, classes, rejects), check every shard against its manifest
    (size and sha256) and save a PNG contact sheet of each split; exit code 1 if a shard is damaged."""
    from vidtx.data.manifest import MANIFEST_SUFFIX, damaged_shards, find_splits, load_manifest
    from vidtx.data.summary import contact_sheet, describe

    if shards.is_file():
        shards, splits = shards.parent, [shards.name.removesuffix(MANIFEST_SUFFIX)]
    splits = splits or find_splits(shards)
    if not splits:
        fail(f"{shards}: no <split>{MANIFEST_SUFFIX} found", code=1)
    damaged = []
    for split in splits:
        try:
            manifest = load_manifest(shards, split)
        except (FileNotFoundError, ValueError) as err:
            fail(str(err), code=1)
        typer.echo(describe(manifest))
        problems = damaged_shards(manifest)
        typer.echo("\n".join(f"  damaged: {problem}" for problem in problems) or "  shards intact")
        damaged += problems
        if videos > 0:
            sheet = contact_sheet(
                manifest, (output or shards) / f"{split}.contact.png", num_videos=videos, num_frames=frames
            )
            typer.echo(f"contact sheet: {sheet}")
    if damaged:
        fail(f"{len(damaged)} damaged shard(s) in {shards}: run `vidtx shard` again to rewrite them", code=1)


def _tags(pairs: list[str]) -> dict[str, str]:
    tags = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--tag {pair}: expected KEY=VALUE")
        tags[key] = value
    return tags


@app.command()
def train(
    config: ConfigArg,
    overrides: OverridesOpt = None,
    tags: Annotated[
        list[str] | None, typer.Option("--tag", help="MLflow run tag KEY=VALUE (repeatable).")
    ] = None,
) -> None:
    """Train with Ray Train + DeepSpeed (local Ray, or a cluster via RAY_ADDRESS / train.cluster.address).

    The same train.run_name and storage path resume a stopped run from its latest checkpoint."""
    import dataclasses
    import json

    from vidtx.train.launcher import RESULT_MARKER
    from vidtx.train.launcher import train as run_training

    cfg = load_config(config, overrides or [])
    result = run_training(cfg, tags=_tags(tags or []))
    metrics = ", ".join(
        f"{key} {value:.4g}" for key, value in result.metrics.items() if isinstance(value, float)
    )
    typer.echo(f"run:         {result.run_name} (resume with --set train.run_name={result.run_name})")
    typer.echo(f"checkpoints: {result.storage_path}/{result.run_name}")
    typer.echo(f"  latest:    {result.checkpoint}\n  best:      {result.best_checkpoint}")
    typer.echo(f"MLflow:      run {result.mlflow_run_id} at {result.tracking_uri}")
    typer.echo(f"metrics:     {metrics}")
    typer.echo(RESULT_MARKER + json.dumps(dataclasses.asdict(result)))


CheckpointOpt = Annotated[
    str | None,
    typer.Option(help="Checkpoint dir/URI, model .pt or models:/name@alias (default: the run's best)."),
]


def _print_evaluation(result: EvalResult) -> None:
    typer.echo(
        f"{result.split}: {result.num_videos} videos ({result.num_skipped} skipped), views {result.views}"
    )
    for ensemble, metrics in result.by_ensemble.items():
        marker = " (primary)" if ensemble == result.primary else ""
        typer.echo(
            f"  {ensemble:10s} top-1 {metrics.top1:.4f}  top-5 {metrics.top5:.4f}  "
            f"mean class acc {metrics.mean_class_accuracy:.4f}{marker}"
        )


@app.command()
def evaluate(config: ConfigArg, overrides: OverridesOpt = None, checkpoint: CheckpointOpt = None) -> None:
    """Multi-view evaluation of a checkpoint or a registered model; logged to the training run."""
    from vidtx.workflow import evaluate_trained, locate

    cfg = load_config(config, overrides or [])
    trained = locate(cfg, checkpoint)
    _print_evaluation(evaluate_trained(cfg, trained))
    if trained.mlflow_run_id:
        typer.echo(f"logged to MLflow run {trained.mlflow_run_id}")


@app.command()
def register(config: ConfigArg, overrides: OverridesOpt = None, checkpoint: CheckpointOpt = None) -> None:
    """Evaluate, log the model to MLflow, register a version and move the aliases."""
    from vidtx.workflow import evaluate_trained, locate, register_trained

    cfg = load_config(config, overrides or [])
    trained = locate(cfg, checkpoint)
    result = evaluate_trained(cfg, trained)
    _print_evaluation(result)
    version = register_trained(cfg, trained, result)
    typer.echo(f"registered {version.model_uri} aliases {', '.join(version.aliases)}: {version.reason}")


@app.command()
def predict(
    videos: Annotated[list[Path], typer.Argument(help="Video files (MP4 or any container FFmpeg reads).")],
    model: Annotated[str, typer.Option(help="Registered model URI.")] = "models:/vidtx-xvit-demo@champion",
    tracking_uri: Annotated[
        str | None, typer.Option(help="MLflow URI (default: MLFLOW_TRACKING_URI).")
    ] = None,
    top_k: Annotated[int, typer.Option(help="Classes to print per video.")] = 5,
    num_clips: Annotated[
        int | None, typer.Option(help="Temporal views (default: the model's eval config).")
    ] = None,
    num_crops: Annotated[
        int | None, typer.Option(help="Spatial views, 1 or 3 (default: eval config).")
    ] = None,
) -> None:
    """Top classes with probabilities for video files, from a registered model (multi-view test)."""
    import os

    from vidtx.eval.predict import predict_videos
    from vidtx.tracking.registry import load_model

    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///runs/demo/mlflow.db"
    loaded = load_model(model, tracking_uri=uri)
    evaluation = loaded.config.eval
    for prediction in predict_videos(
        loaded.module,
        loaded.config.data,
        loaded.class_names,
        videos,
        num_clips=num_clips or evaluation.num_clips,
        num_crops=num_crops or evaluation.num_crops,
        top_k=top_k,
    ):
        typer.echo(prediction.video)
        for name, probability in prediction.top:
            typer.echo(f"  {probability:6.1%}  {name}")


@app.command()
def pipeline(config: ConfigArg, overrides: OverridesOpt = None) -> None:
    """Run the whole pipeline as the `video-pipeline` Prefect flow (shard, train, evaluate, register).

    Uses the Prefect API at PREFECT_API_URL, else a temporary local one; the flow lives in `flows/`,
    so this command starts it in a child process (the vidtx library never imports Prefect)."""
    import subprocess

    load_config(config, overrides or [])  # fail on a bad config before starting anything
    command = [sys.executable, "-m", "flows.pipeline", str(config)]
    command += [arg for override in overrides or [] for arg in ("--set", override)]
    raise typer.Exit(subprocess.run(command, check=False).returncode)


@app.command()
def models() -> None:
    """List the model presets with parameters and GFLOPs per view."""
    from rich.console import Console
    from rich.table import Table

    from vidtx.models import list_models, model_info

    table = Table(title="Model presets (GFLOPs = multiply-adds per view, as in the papers)")
    for column in ("preset", "model", "frames x size"):
        table.add_column(column, no_wrap=True)
    for column in ("params (M)", "GFLOPs/view", "attn GFLOPs"):
        table.add_column(column, justify="right", no_wrap=True)
    for name in list_models():
        info = model_info(name)
        table.add_row(
            name,
            info["model"],
            f"{info['num_frames']}x{info['img_size']}",
            f"{info['params'] / 1e6:.1f}",
            f"{info['gflops']:.2f}",
            f"{info['attention_gflops']:.2f}",
        )
    Console(width=max(Console().width, 120)).print(table)


@app.command()
def bench(
    names: Annotated[
        list[str] | None, typer.Argument(help="Benchmarks to run (default: the whole CPU set).")
    ] = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="Small sizes, few repeats; results in runs/bench-quick/.")
    ] = False,
) -> None:
    """Run the CPU benchmarks (writes benchmarks/results/).

    Runs `python -m benchmarks.run` in the source checkout (benchmarks/ is not in the library)."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    if not (root / "benchmarks" / "run.py").is_file():
        fail(f"no benchmarks/ next to {Path(__file__).parent}: run `vidtx bench` from a source checkout")
    command = [sys.executable, "-m", "benchmarks.run", *(names or []), *(["--quick"] if quick else [])]
    raise typer.Exit(subprocess.run(command, cwd=root, check=False).returncode)


def main() -> None:
    try:
        app()
    except ConfigError as err:
        typer.echo(f"error: {err}", err=True)
        sys.exit(2)
