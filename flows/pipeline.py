"""`video-pipeline`: shard -> train -> evaluate -> register, passing each stage's result to the next."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.client.schemas.objects import State
from pydantic import BaseModel

from flows.cancellation import cancelled
from flows.evaluate import evaluate_model, find_trained, register
from flows.forms import EvaluateForm, PipelineForm, ShardForm, TrainForm, config_of
from flows.lineage import LOCAL_PREFECT_UI, lineage_table, prefect_ui
from flows.shard import shard_dataset
from flows.train import named_run, train_model
from vidtx.config import PipelineConfig
from vidtx.results import ModelVersionInfo, ShardedSplit
from vidtx.shard.synthetic import frame_order_verdict
from vidtx.tracking.lineage import run_lineage
from vidtx.tracking.links import LOCAL_MLFLOW_UI, model_version_link
from vidtx.train.splits import evaluation_split

logger = logging.getLogger("flows.pipeline")  # also when run as __main__ (python -m flows.pipeline)


class PipelineResult(BaseModel):
    """What one pipeline run produced: `vidtx pipeline --json` prints it."""

    name: str
    splits: dict[str, ShardedSplit]
    run_name: str
    mlflow_run_id: str
    mlflow_run_url: str
    mlflow_experiment_url: str
    checkpoint: str
    eval_split: str
    views: str
    metrics: dict[str, float]
    model_name: str
    model_version: str
    model_uri: str
    model_version_url: str
    aliases: list[str]
    promotion: str  # why the version did or did not become champion
    frame_order: str | None = None  # on the synthetic dataset: does the top-1 show order is read


def plain_link(text: str, url: str) -> str:
    return f"{text} -> {url}"


def markdown_link(text: str, url: str) -> str:
    return f"[{text}]({url})"


def browse_line(mlflow_experiment: str, prefect: str) -> str:
    """Where to look: the run's experiment in MLflow (its model-training view, not the UI's root with
    the GenAI pages) and the Prefect UI; `make ui` serves both for the local stores."""
    uis = f"{mlflow_experiment} (MLflow) and {prefect} (Prefect)"
    local = mlflow_experiment.startswith(f"{LOCAL_MLFLOW_UI}/") and prefect.startswith(LOCAL_PREFECT_UI)
    return f"make ui, then {uis}" if local else uis


def summary_lines(
    result: PipelineResult, link: Callable[[str, str], str]
) -> tuple[str, list[tuple[str, str]]]:
    """The headline and the (label, value) rows of the summary, with `link` writing each link."""
    metrics = result.metrics
    if "mean_ap" in metrics:  # a multi-label model
        scores = (
            f"mAP {metrics['mean_ap']:.3f} ({result.views} views; mean {metrics['mean/mean_ap']:.3f}, "
            f"max {metrics['max/mean_ap']:.3f}), micro-F1 {metrics['micro_f1']:.3f}"
        )
    else:
        scores = (
            f"top-1 {metrics['top1']:.3f} ({result.views} views; logits-sum {metrics['logits_sum/top1']:.3f}, "
            f"prob-mean {metrics['prob_mean/top1']:.3f}), top-5 {metrics['top5']:.3f}"
        )
    headline = (
        f"video-pipeline {result.name} finished: {result.eval_split} {scores}, {metrics['videos']:.0f} videos"
    )
    return headline, [
        ("data", ", ".join(f"{split}: {info.samples} videos" for split, info in result.splits.items())),
        (
            "training run",
            f"{result.run_name}, MLflow run {link(result.mlflow_run_id, result.mlflow_run_url)}",
        ),
        ("model", f"{result.model_uri} aliases {', '.join(result.aliases) or 'none'} ({result.promotion})"),
        *([("frame order", result.frame_order)] if result.frame_order else []),
        ("browse", browse_line(result.mlflow_experiment_url, prefect_ui())),
        ("predict", f"vidtx predict VIDEO.mp4 --model models:/{result.model_name}@champion"),
    ]


def render_summary(result: PipelineResult) -> str:
    """The summary a person reads at the end of `vidtx pipeline`: plain text, links as URLs."""
    headline, rows = summary_lines(result, plain_link)
    return "\n".join([headline, *(f"  {label:<14} {value}" for label, value in rows)])


def summary_markdown(config: PipelineConfig, result: PipelineResult, version: ModelVersionInfo) -> str:
    """The flow's summary artifact: the same summary with links, then the lineage table (which links
    the model version)."""
    headline, rows = summary_lines(result, markdown_link)
    return "\n".join(
        [
            f"**{headline}**",
            "",
            *(f"- {label}: {value}" for label, value in rows),
            "",
            lineage_table(config, result.mlflow_run_id, version),
        ]
    )


def stage(number: int, name: str, what: str) -> None:
    logger.info("[%d/4] %s: %s", number, name, what)


@flow(name="video-pipeline", log_prints=True)
def video_pipeline(settings: PipelineForm) -> PipelineResult | State:
    """The whole pipeline. Training reads the shards this run writes (`data.shards` is set to
    `shard.output`), and the training run is named after this flow run unless `train.run_name` is set.
    Each stage's flow is given the same config file and settings, with those two."""
    config = config_of(settings)
    if isinstance(config, State):
        return config
    config = named_run(config)  # its model checked: one that cannot be built fails before any sharding
    config.data.shards = config.shard.output
    ours = [f"data.shards={json.dumps(str(config.shard.output))}", f"train.run_name={config.train.run_name}"]
    given = {"config": settings.config, "overrides": [*settings.given(), *ours]}

    stage(1, "shard-dataset", f"{config.shard.source} -> {config.shard.output}")
    splits = shard_dataset(ShardForm(**given))
    split = evaluation_split(config).split  # a split the shards lack fails now, not after the training
    train = config.train
    stage(2, "train-model", f"{train.run_name}: {train.num_workers} workers, {train.max_steps} steps")
    training = train_model(TrainForm(**given), return_state=True)
    if training.is_cancelled():
        return cancelled(training)
    trained = training.result()
    checkpoint = trained.best_checkpoint or trained.checkpoint
    config.eval.checkpoint = checkpoint
    stage(3, "evaluate-model", f"{split} split, {config.eval.num_clips}x{config.eval.num_crops} views")
    given["overrides"].append(f"eval.checkpoint={json.dumps(checkpoint)}")
    evaluation = evaluate_model(EvaluateForm(**given))
    stage(4, "register-model", config.registry.model_name)
    version = register(config, find_trained(config), evaluation)
    metrics = evaluation.metrics()
    lineage = run_lineage(config, trained.mlflow_run_id)
    result = PipelineResult(
        name=config.name,
        splits=splits,
        run_name=trained.run_name,
        mlflow_run_id=trained.mlflow_run_id,
        mlflow_run_url=lineage.mlflow_run_url,
        mlflow_experiment_url=lineage.mlflow_experiment_url,
        checkpoint=checkpoint,
        eval_split=evaluation.split,
        views=evaluation.views,
        metrics=metrics,
        model_name=version.name,
        model_version=version.version,
        model_uri=version.model_uri,
        model_version_url=model_version_link(config, version.name, version.version),
        aliases=version.aliases,
        promotion=version.reason,
        frame_order=frame_order_verdict(metrics["top1"], evaluation.class_names)
        if config.synth is not None and not evaluation.multilabel
        else None,
    )
    create_markdown_artifact(
        summary_markdown(config, result, version),
        key="pipeline-summary",
        description="What this pipeline run produced",
    )
    for line in render_summary(result).splitlines():  # the run's log and the log file end with it (the
        get_run_logger().info("%s", line)  # console prints it once the flow returns)
    return result


def main(argv: list[str] | None = None) -> None:
    """`python -m flows.pipeline CONFIG [--set KEY=VALUE ...] [--json]` (what `vidtx pipeline` runs)."""
    import argparse
    import datetime
    import sys

    from vidtx.config import load_config
    from vidtx.log import FILE_ONLY, setup_logging

    parser = argparse.ArgumentParser(prog="python -m flows.pipeline", description=video_pipeline.description)
    parser.add_argument("config", help="pipeline config YAML")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of a summary")
    args = parser.parse_args(argv)
    settings = PipelineForm(config=args.config, overrides=args.overrides)
    config = load_config(args.config, args.overrides)
    log_file = (config.workdir / "logs" / f"pipeline-{datetime.datetime.now():%Y%m%d-%H%M%S}.log").resolve()
    setup_logging(log_file=log_file)
    print(f"video-pipeline {config.name}: the full log goes to {log_file}", file=sys.stderr)
    result = video_pipeline(settings)
    summary = f"{render_summary(result)}\n  full log       {log_file}"
    print(result.model_dump_json(indent=2) if args.json else f"\n{summary}")
    for line in summary.splitlines():
        logger.info("%s", line, extra=FILE_ONLY)  # the log file ends as the console does


if __name__ == "__main__":
    main()
