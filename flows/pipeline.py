"""`video-pipeline`: shard -> train -> evaluate -> register, passing each stage's result to the next."""

from __future__ import annotations

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from flows.defaults import DEMO
from flows.evaluate import evaluate_model, register_model
from flows.links import model_version_link
from flows.shard import shard_dataset
from flows.train import run_name_for, train_model
from vidtx.config import PipelineConfig


@flow(name="video-pipeline", log_prints=True)
def video_pipeline(config: PipelineConfig = DEMO) -> dict:
    """The whole pipeline. Training reads the shards this run writes (`data.shards` is set to
    `shard.output`), and the training run is named after this flow run unless `train.run_name` is set."""
    config = config.model_copy(deep=True)
    config.data.shards = config.shard.output
    config.train.run_name = run_name_for(config)

    shards = shard_dataset(config.shard, config.synth)
    trained = train_model(config)
    checkpoint = trained.best_checkpoint or trained.checkpoint
    evaluation = evaluate_model(config, checkpoint)
    version = register_model(config, checkpoint, evaluation)

    summary = {
        "shards": shards,
        "run_name": trained.run_name,
        "mlflow_run_id": trained.mlflow_run_id,
        "checkpoint": checkpoint,
        "metrics": evaluation.metrics(),
        "model_version": version.version,
        "model_uri": version.model_uri,
        "aliases": version.aliases,
    }
    data = ", ".join(f"{split}: {info['samples']} videos" for split, info in shards.items())
    create_markdown_artifact(
        f"# {config.name}\n\n"
        f"- data: {data}\n"
        f"- training run `{trained.run_name}`, MLflow run `{trained.mlflow_run_id}`\n"
        f"- {evaluation.split} top-1 {evaluation.metrics()['top1']:.4f} ({evaluation.views} views)\n"
        f"- [{version.name} v{version.version}]({model_version_link(config, version.name, version.version)})"
        f" aliases: {', '.join(version.aliases)} ({version.reason})\n",
        key="pipeline-summary",
        description="What this pipeline run produced",
    )
    return summary


def main(argv: list[str] | None = None) -> None:
    """`python -m flows.pipeline CONFIG [--set KEY=VALUE ...]` (what `vidtx pipeline` runs)."""
    import argparse
    import json

    from vidtx.config import load_config
    from vidtx.log import setup_logging

    parser = argparse.ArgumentParser(prog="python -m flows.pipeline", description=video_pipeline.description)
    parser.add_argument("config", help="pipeline config YAML")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    setup_logging()
    config = load_config(args.config, args.overrides)
    summary = video_pipeline(config)
    metrics = summary["metrics"]
    print(
        f"\nvideo-pipeline finished: {config.eval.split} top-1 {metrics['top1']:.3f} "
        f"(logits-sum {metrics['logits_sum/top1']:.3f}, prob-mean {metrics['prob_mean/top1']:.3f}, "
        f"top-5 {metrics['top5']:.3f}, {metrics['videos']:.0f} videos)\n"
        f"  training run   {summary['run_name']} -> MLflow run {summary['mlflow_run_id']}\n"
        f"  model          {summary['model_uri']} aliases {', '.join(summary['aliases'])}\n"
        f"  browse         make ui, then http://127.0.0.1:5000 (MLflow) and http://127.0.0.1:4200 (Prefect)\n"
        f"  predict        vidtx predict VIDEO.mp4 --model models:/{config.registry.model_name}@champion"
    )
    print("VIDTX_PIPELINE_RESULT " + json.dumps(summary, default=str))


if __name__ == "__main__":
    main()
