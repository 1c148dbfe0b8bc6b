"""The `vidtx` command line: a thin layer over the library. Every command takes the pipeline config
that the Prefect flows take, with dotted `--set` overrides; positional arguments are shortcuts for the
fields they name (`vidtx shard SOURCE OUTPUT` sets `shard.source` and `shard.output`)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from vidtx.cli_help import print_settings, reads
from vidtx.config import ConfigError, PipelineConfig, dump_config, load_config
from vidtx.env import apply_defaults
from vidtx.files import one_line
from vidtx.log import setup_logging
from vidtx.processes import TerminatedError, what_stopped

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
    Path, typer.Argument(help="Pipeline config YAML (configs/).", exists=True, dir_okay=False)
]
OptionalConfigOpt = Annotated[
    Path | None,
    typer.Option("--config", "-c", help="Pipeline config YAML (default: built-in defaults).", dir_okay=False),
]
OverridesOpt = Annotated[
    list[str] | None,
    typer.Option("--set", "-s", help="Dotted override, e.g. --set train.optimizer.lr=0.05 (repeatable)."),
]
TagsOpt = Annotated[list[str] | None, typer.Option("--tag", help="MLflow run tag KEY=VALUE.")]
CheckpointOpt = Annotated[
    str | None,
    typer.Option(help="Checkpoint dir/URI, model .pt or models:/name@alias (default: the run's best)."),
]


def fail(message: str, code: int = 2) -> NoReturn:  # one line, no traceback
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def with_shortcuts(shortcuts: dict[str, object], overrides: list[str] | None) -> list[str]:
    """`--set` overrides after those of the shortcuts given (dotted field -> value, None: not given)."""
    given = [f"{field}={json.dumps(str(value))}" for field, value in shortcuts.items() if value is not None]
    return given + (overrides or [])


def load(
    config: Path | None,
    overrides: list[str] | None,
    shortcuts: dict[str, str | Path | None] | None = None,
    model: bool = True,
) -> PipelineConfig:
    """The config with `shortcuts` (dotted field -> value, None: not given) and then `--set` applied,
    its model checked against the zoo unless the command builds none (the check costs ~1 s of torch)."""
    from vidtx import model_factory, storage

    loaded = load_config(config, with_shortcuts(shortcuts or {}, overrides))
    storage.configure(loaded.storage.endpoint_url, loaded.storage.region)
    if model:
        model_factory.check_model_config(loaded)
    return loaded


@app.callback()
def _root(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="All output.")] = False) -> None:
    apply_defaults()
    setup_logging(verbose)


@config_app.command("show", cls=reads("config show"))
def config_show(config: ConfigArg, overrides: OverridesOpt = None) -> None:
    """Print the resolved config (includes merged, overrides applied, defaults filled in)."""
    typer.echo(dump_config(load(config, overrides)), nl=False)


@config_app.command("fields")
def config_fields(
    sections: Annotated[list[str] | None, typer.Argument(help="(default: all)")] = None,
) -> None:
    """Every setting of the schema: key, type or choices, default and description."""
    print_settings(sections)


@app.command(cls=reads("synth"))
def synth(
    output: Annotated[Path | None, typer.Argument(help="Output folder (synth.output).")] = None,
    config: OptionalConfigOpt = None,
    overrides: OverridesOpt = None,
) -> None:
    """Generate a synthetic dataset of MP4 videos whose class only the frame order tells."""
    from vidtx.config import SynthConfig
    from vidtx.shard.synthetic import generate_dataset

    cfg = load(config, overrides, {"synth.output": output}, model=False).synth or SynthConfig()
    typer.echo(f"wrote {generate_dataset(cfg)}")


@app.command(cls=reads("shard"))
def shard(
    source: Annotated[str | None, typer.Argument(help="Dataset root or annotations (shard.source).")] = None,
    output: Annotated[str | None, typer.Argument(help="Shards folder or bucket (shard.output).")] = None,
    config: OptionalConfigOpt = None,
    overrides: OverridesOpt = None,
) -> None:
    """Probe, filter and write a video dataset into WebDataset shards and one manifest per split."""
    from vidtx.stages.shard import shard_dataset

    cfg = load(config, overrides, {"shard.source": source, "shard.output": output}, model=False).shard
    typer.echo(shard_dataset(cfg).summary())


@app.command()
def inspect(
    shards: Annotated[str, typer.Argument(help="Shard folder, bucket prefix or a <split>.manifest.json.")],
    splits: Annotated[list[str] | None, typer.Option("--split", help="Split (repeatable).")] = None,
    videos: Annotated[int, typer.Option(help="Videos in the contact sheet (0: none).")] = 4,
    frames: Annotated[int, typer.Option(help="Frames per video in the contact sheet.")] = 8,
    output: Annotated[str | None, typer.Option(help="Contact sheet folder (default: SHARDS).")] = None,
) -> None:
    """Summarise sharded splits (counts, classes, rejects), check every shard against its manifest
    (size and sha256) and save a PNG contact sheet of each split; exit code 1 if a shard is damaged."""
    from vidtx.data.summary import inspect_shards

    if damaged := inspect_shards(shards, splits, typer.echo, videos=videos, frames=frames, output=output):
        fail(f"{len(damaged)} damaged shard(s) in {shards}: run `vidtx shard` again to rewrite them", code=1)


@app.command()
def index(shards: Annotated[str, typer.Argument(help="Shard folder or bucket prefix.")]) -> None:
    """Add the indexes that old frames-store shards lack: a clip then reads only its frames from a bucket."""
    from vidtx.shard.tars import add_indexes

    typer.echo(f"{len(add_indexes(shards))} index(es) written in {shards}")


@app.command(cls=reads("train"))
def train(config: ConfigArg, overrides: OverridesOpt = None, tags: TagsOpt = None) -> None:
    """Train with Ray Train + DeepSpeed (local Ray, or a cluster via RAY_ADDRESS / train.cluster.address).

    The same train.run_name and storage path resume a stopped run from its latest checkpoint."""
    from vidtx.stages.train import train as run_training
    from vidtx.tracking.runs import parse_tags

    typer.echo(run_training(load(config, overrides), tags=parse_tags(tags or [])).summary())


@app.command(cls=reads("pretrain"))
def pretrain(config: ConfigArg, overrides: OverridesOpt = None, tags: TagsOpt = None) -> None:
    """Pretrain the model as a masked autoencoder (VideoMAE), labels ignored; fine-tune from it with
    --set model.init_from=CHECKPOINT. The same train.run_name resumes a stopped run."""
    from vidtx.stages.pretrain import pretrain as run_pretraining
    from vidtx.tracking.runs import parse_tags

    typer.echo(run_pretraining(load(config, overrides), tags=parse_tags(tags or [])).summary())


@app.command(cls=reads("sweep"))
def sweep(config: ConfigArg, overrides: OverridesOpt = None) -> None:
    """Search sweep.space with Ray Tune: each trial a Ray Train + DeepSpeed training, weak ones stopped
    early (ASHA), all under one MLflow run; the best is evaluated and registered. The same
    sweep.name resumes a stopped sweep."""
    from vidtx.stages.sweep import run_sweep

    typer.echo(run_sweep(load(config, overrides)).summary())


@app.command(cls=reads("evaluate"))
def evaluate(config: ConfigArg, overrides: OverridesOpt = None, checkpoint: CheckpointOpt = None) -> None:
    """Multi-view evaluation of a checkpoint or a registered model; logged to the training run."""
    from vidtx.stages.evaluate import evaluate_run

    typer.echo(evaluate_run(load(config, overrides), checkpoint, register=False))


@app.command(cls=reads("register"))
def register(config: ConfigArg, overrides: OverridesOpt = None, checkpoint: CheckpointOpt = None) -> None:
    """Evaluate, log the model to MLflow, register a version and move the aliases."""
    from vidtx.stages.evaluate import evaluate_run

    typer.echo(evaluate_run(load(config, overrides), checkpoint, register=True))


@app.command(cls=reads("export"))
def export(config: ConfigArg, overrides: OverridesOpt = None, checkpoint: CheckpointOpt = None) -> None:
    """The network as ONNX (dynamic batch), checked in onnxruntime against PyTorch on decoded clips;
    a registered model's version gets the file and the figure."""
    from vidtx.stages.export import export_trained

    typer.echo(export_trained(load(config, overrides), checkpoint).summary())


@app.command(cls=reads("predict"))
def predict(
    videos: Annotated[list[str], typer.Argument(help="Videos, folders, CSV lists; here or in a bucket.")],
    model: Annotated[str, typer.Option(help="Registered model URI.")] = "models:/vidtx-xvit-demo@champion",
    tracking_uri: Annotated[str | None, typer.Option(help="MLflow URI (else $MLFLOW_TRACKING_URI).")] = None,
    top_k: Annotated[int | None, typer.Option(help="Classes per video (predict.top_k).")] = None,
    output: Annotated[str | None, typer.Option(help="Table to write (predict.output).")] = None,
    overrides: OverridesOpt = None,
) -> None:
    """Top classes with probabilities for videos, from a registered model (the multi-view test of the
    model's own config, e.g. --set eval.num_crops=1; as a Ray Data job with --set predict.ray_address)."""
    from vidtx.stages.predict import load_for_prediction, predict_videos, print_row

    settings = with_shortcuts({"predict.top_k": top_k, "predict.output": output}, overrides)
    summary = predict_videos(*load_for_prediction(model, tracking_uri, settings), videos, print_row)
    typer.echo(summary.text())
    if summary.failed:
        fail(f"{summary.failed} of {summary.videos} videos could not be read", 1)


@app.command(cls=reads("pipeline"))
def pipeline(
    config: ConfigArg,
    overrides: OverridesOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON, not a summary.")] = False,
) -> None:
    """Run the `video-pipeline` Prefect flow (shard, train, evaluate, register) in a child process, on
    the Prefect API at PREFECT_API_URL, else a temporary local one."""
    load(config, overrides)  # fail on a bad config before starting anything
    command = [sys.executable, "-m", "flows.pipeline", str(config), *(["--json"] if as_json else [])]
    command += [arg for override in overrides or [] for arg in ("--set", override)]
    raise typer.Exit(subprocess.run(command, check=False).returncode)


@app.command()
def convert(
    source: Annotated[str, typer.Argument(help="Hugging Face folder or file, or official .pth.")],
    target: Annotated[Path, typer.Argument(help="The vidtx .pt to write.", dir_okay=False)],
) -> None:
    """Write a VideoMAE checkpoint as a vidtx .pt (model.init_from also takes it as it is)."""
    from vidtx.stages.convert import convert_checkpoint

    typer.echo(convert_checkpoint(source, target))


@app.command()
def models() -> None:
    """List the model presets with parameters and GFLOPs per view (multiply-adds, as in the papers)."""
    from vidtx.model_factory import zoo_table

    typer.echo(zoo_table())


@app.command(cls=reads("plan"))
def plan(
    configs: Annotated[list[Path], typer.Argument(help="Pipeline configs to plan for.", exists=True)],
    overrides: OverridesOpt = None,
    gpus: Annotated[list[int] | None, typer.Option(help="GPU counts (repeatable).")] = None,
    gpu_memory: Annotated[list[float] | None, typer.Option(help="GiB per GPU (repeatable).")] = None,
    classes: Annotated[int, typer.Option(help="Classes of the dataset (174: SSv2).")] = 174,
    clips_per_second: Annotated[float | None, typer.Option(help="Measured clips/s per GPU.")] = None,
    mfu: Annotated[float | None, typer.Option(help="Model FLOPs utilisation (x train.peak_tflops).")] = None,
) -> None:
    """GPU memory per GPU by ZeRO stage and micro-batch for each config, and step times when a
    throughput is given (an estimate: see infra/README.md, Sizing)."""
    from vidtx.gpu_plan import report

    loaded = [load(config, overrides) for config in configs]
    throughput = {"num_classes": classes, "clips_per_second": clips_per_second, "mfu": mfu}
    typer.echo(report(loaded, gpus or [1, 2, 4, 8, 16, 32, 64], gpu_memory or [40, 80, 141], **throughput))


def main() -> None:
    # Bad input, unwritable files: one line, exit 2 (config) or 1 (--verbose: the traceback); SIGTERM: 143.
    try:
        app()
    except TerminatedError as err:
        typer.echo(f"{what_stopped(err)}; run the same command again to resume", err=True)
        sys.exit(143)
    except (ConfigError, ValueError, OSError) as err:
        if logging.getLogger().level <= logging.DEBUG:
            raise
        typer.echo(f"error: {one_line(err) if isinstance(err, OSError) else err}", err=True)
        sys.exit(2 if isinstance(err, ConfigError) else 1)
