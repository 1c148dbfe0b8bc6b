"""The MLflow Model Registry: log a trained model, register a version, move the aliases.

Every new version whose top-1 is above the floor (`registry.min_top1`, by default chance) gets alias
`challenger`; one at or below it is registered without an alias. `champion` moves to a challenger only
when it beats the current champion on the configured metric measured on the same evaluation split
(same manifest hash and views); the first such version becomes champion. Aliases only, never the
deprecated stages.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Iterator
from pathlib import Path

import mlflow
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.utils.logging_utils import disable_logging, enable_logging
from torch import nn

from vidtx.config import PipelineConfig, RegistryConfig
from vidtx.eval.report import render_results
from vidtx.models import count_flops
from vidtx.results import EvalResult, ModelVersionInfo
from vidtx.serving.classifier import VideoClassifier
from vidtx.serving.packaging import log_classifier, read_classifier
from vidtx.tracking.runs import mlflow_uris

logger = logging.getLogger(__name__)

CARD_FILE = "MODEL_CARD.md"
METRIC_TAG = "vidtx.metric.{}"
SPLIT_TAG = "vidtx.eval_split"  # manifest hash + views: what makes two metrics comparable


@contextlib.contextmanager
def _without_mlflow_prints() -> Iterator[None]:
    """`mlflow.register_model` prints "Successfully registered model ..." and "Created version ..." on
    stderr (not through logging); the registry's own log record says the same."""
    disable_logging()
    try:
        yield
    finally:
        enable_logging()


def model_card(
    config: PipelineConfig, result: EvalResult, gflops: float, params: int, train_seconds: float | None
) -> str:
    """The model card without a heading: it is also the version's description (without its code marks),
    which the registry's pages show as raw text (a "# name" first line read as such). `MODEL_CARD.md`
    adds the heading."""
    hours = f"{train_seconds / 3600:.2f} h" if train_seconds else "unknown"
    data = config.data
    sources = ", ".join(f"`{s.shards}` (weight {s.weight:g})" for s in data.sources) or f"`{data.shards}`"
    return f"""Video classifier `{config.model.name}` ({params / 1e6:.2f} M parameters, {gflops:.2f} GFLOPs per view,
multiply-adds), input clips (B, 3, {config.data.num_frames}, {config.data.crop_size}, {config.data.crop_size}),
{len(result.class_names)} classes, normalised with mean {config.data.mean} and std {config.data.std}.

- Training data: {sources}, split `{data.train_split}`
- Evaluation: manifest hash `{result.manifest_hash}`
- Training time: {hours}

{render_results(result)}

Promotion metric: `{config.registry.metric}` of the `{result.primary}` ensemble.
"""


def _decide_promotion(
    client: MlflowClient, registry: RegistryConfig, score: float, split_tag: str
) -> tuple[bool, str]:
    try:
        champion = client.get_model_version_by_alias(registry.model_name, registry.champion_alias)
    except MlflowException:
        return True, "no champion yet: the first version above the floor"
    if champion.tags.get(SPLIT_TAG) != split_tag:
        return False, f"champion v{champion.version} was evaluated on another split or views; not comparable"
    best = float(champion.tags[METRIC_TAG.format(registry.metric)])
    better = score > best if registry.greater_is_better else score < best
    verdict = "beats" if better else "does not beat"
    return better, f"{registry.metric} {score:.4f} {verdict} champion v{champion.version} ({best:.4f})"


def _below_floor(registry: RegistryConfig, result: EvalResult) -> str | None:
    """Why a version gets no alias: its top-1 is below `registry.min_top1`, or, when that is None, not
    better than chance (1 / number of classes)."""
    classes, top1 = len(result.class_names), result.metrics()["top1"]
    if registry.min_top1 is None:
        if top1 > 1 / classes:
            return None
        return f"not better than chance: top1 {top1:.4f} <= {1 / classes:.4f} ({classes} classes); registered without an alias"
    if top1 >= registry.min_top1:
        return None
    return f"below registry.min_top1: top1 {top1:.4f} < {registry.min_top1:.4f}; registered without an alias"


def register(
    model: nn.Module,
    config: PipelineConfig,
    result: EvalResult,
    *,
    client: MlflowClient,
    run_id: str,
) -> ModelVersionInfo:
    """Log `model` into run `run_id`, register it under `registry.model_name` and move the aliases."""
    registry, data = config.registry, config.data
    score = result.metrics()[registry.metric]
    model = model.eval().float().cpu()
    flops = count_flops(model, (1, 3, data.num_frames, data.crop_size, data.crop_size))
    run = client.get_run(run_id)
    train_seconds = (run.info.end_time - run.info.start_time) / 1000 if run.info.end_time else None
    card = model_card(config, result, flops.gflops, sum(p.numel() for p in model.parameters()), train_seconds)
    split_tag = f"{result.manifest_hash}:{result.views}"
    tags = {
        METRIC_TAG.format(registry.metric): str(score),
        SPLIT_TAG: split_tag,
        "vidtx.gflops_per_view": f"{flops.gflops:.3f}",
    }
    with mlflow_uris(client.tracking_uri):
        with mlflow.start_run(run_id=run_id):
            card_file = {CARD_FILE: f"# {registry.model_name}\n\n{card}"}
            # the logged model is named as the registered one
            info = log_classifier(model, config, result.class_names, registry.model_name, card_file)
        with _without_mlflow_prints():
            version = mlflow.register_model(info.model_uri, registry.model_name, tags=tags).version
    # the registry's pages show a description as it is written: the card without code marks
    client.update_model_version(registry.model_name, version, description=card.replace("`", ""))
    below_floor = _below_floor(registry, result)
    promote, reason = (
        (False, below_floor) if below_floor else _decide_promotion(client, registry, score, split_tag)
    )
    if not below_floor:
        client.set_registered_model_alias(registry.model_name, registry.challenger_alias, version)
    if promote:
        client.set_registered_model_alias(registry.model_name, registry.champion_alias, version)
    aliases = client.get_model_version(registry.model_name, version).aliases
    logger.info(
        "registered %s v%s (%s); %s", registry.model_name, version, ", ".join(aliases) or "no alias", reason
    )
    return ModelVersionInfo(
        registry.model_name,
        str(version),
        f"models:/{registry.model_name}/{version}",
        list(aliases),
        promote,
        reason,
        run_id,
    )


def load_registered_model(model_uri: str, tracking_uri: str | None = None) -> VideoClassifier:
    """`models:/<name>@<alias>` (or `/<version>`) as the classifier: its network (`.module`), config and
    class names, read from the model's artifacts without MLflow's pyfunc loader."""
    uris = mlflow_uris(tracking_uri) if tracking_uri else contextlib.nullcontext()
    with uris, tempfile.TemporaryDirectory() as directory:
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=model_uri, dst_path=directory))
        return read_classifier(local)
