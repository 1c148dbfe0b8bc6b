"""The `vidtx` command line. Every command takes the same configs as the Prefect flows."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from vidtx.config import ConfigError, dump_config, load_config
from vidtx.env import apply_defaults
from vidtx.log import setup_logging

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


@app.command()
def synth(output: Annotated[Path, typer.Argument(help="Output folder.")]) -> None:
    """Generate a synthetic dataset of MP4 videos whose class only the frame order tells."""
    not_implemented("synth")


@app.command()
def shard(
    source: Annotated[Path, typer.Argument(help="Dataset root or annotation file.")],
    output: Annotated[Path, typer.Argument(help="Output folder for shards and manifests.")],
) -> None:
    """Probe, filter and write a video dataset into WebDataset shards."""
    not_implemented("shard")


@app.command()
def inspect(shards: Annotated[Path, typer.Argument(help="Shard folder or manifest.")]) -> None:
    """Summarise a sharded split and save a contact sheet of decoded clips."""
    not_implemented("inspect")


@app.command()
def train(config: ConfigArg, overrides: OverridesOpt = None) -> None:
    """Train with Ray Train + DeepSpeed (local Ray, or a cluster via RAY_ADDRESS)."""
    load_config(config, overrides or [])
    not_implemented("train")


@app.command()
def evaluate(config: ConfigArg, overrides: OverridesOpt = None) -> None:
    """Multi-view evaluation of a checkpoint or a registered model."""
    load_config(config, overrides or [])
    not_implemented("evaluate")


@app.command()
def register(config: ConfigArg, overrides: OverridesOpt = None) -> None:
    """Log the model to MLflow, register a version and move the aliases."""
    load_config(config, overrides or [])
    not_implemented("register")


@app.command()
def predict(videos: Annotated[list[Path], typer.Argument(help="MP4 files.")]) -> None:
    """Top classes for video files from a registered model."""
    not_implemented("predict")


@app.command()
def pipeline(config: ConfigArg, overrides: OverridesOpt = None) -> None:
    """Run the whole pipeline as the `video-pipeline` Prefect flow."""
    load_config(config, overrides or [])
    not_implemented("pipeline")


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
def bench() -> None:
    """Run the CPU benchmarks (writes benchmarks/results/)."""
    not_implemented("bench")


def main() -> None:
    try:
        app()
    except ConfigError as err:
        typer.echo(f"error: {err}", err=True)
        sys.exit(2)
