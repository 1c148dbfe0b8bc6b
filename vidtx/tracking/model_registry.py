"""The MLflow Model Registry: log a trained model (or a pretrained encoder), register a version, move
the aliases; read a registered model back, and an alias as the version it names now.

Every new version whose top-1 (a multi-label model's mAP) is above the floor (`registry.min_top1`,
`registry.min_map`; by default chance) gets alias `challenger`; one at or below it is registered without an alias. `champion` moves to a challenger only
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
from urllib.parse import urlparse

import mlflow
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.utils.logging_utils import disable_logging, enable_logging
from torch import nn

from vidtx.config import PipelineConfig, RegistryConfig
from vidtx.eval.report import render_results
from vidtx.models import count_flops
from vidtx.results import EvalResult, ModelVersionInfo, MultiLabelMetrics
from vidtx.serving.packaging import log_video_model, read_video_model
from vidtx.serving.video_model import ServedVideoModel
from vidtx.tracking.lineage import MANIFEST_HASH_TAG, OBJECTIVE_TAG
from vidtx.tracking.runs import logging_into, mlflow_uris, sqlite_file

logger = logging.getLogger(__name__)

POINT_ELSEWHERE = "point --tracking-uri (or MLFLOW_TRACKING_URI) at the store the model was registered in"

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
    # one line per paragraph: the registry's pages show the description as written, and a line
    # break inside a sentence would show there too
    summary = (
        f"Video classifier `{config.model.name}` ({params / 1e6:.2f} M parameters, {gflops:.2f} GFLOPs per "
        f"view, multiply-adds), input clips (B, 3, {data.num_frames}, {data.crop_size}, {data.crop_size}), "
        f"{len(result.class_names)} classes, normalised with mean {data.mean} and std {data.std}."
    )
    facts = "\n".join(
        [
            f"- Training data: {sources}, split `{data.train_split}`",
            f"- Evaluation: manifest hash `{result.manifest_hash}`",
            f"- Training time: {hours}",
        ]
    )
    promotion = f"Promotion metric: `{config.promotion_metric}` of the `{result.primary}` ensemble."
    return "\n\n".join([summary, facts, render_results(result), promotion]) + "\n"


def encoder_card(config: PipelineConfig, params: int, run_id: str) -> str:
    """The description of a pretrained encoder's version: what it is and how a fine-tune starts from it."""
    pretrain, data = config.pretrain, config.data
    what = (
        f"Pretrained video encoder {config.model.name} ({params / 1e6:.2f} M parameters): the encoder of a "
        f"masked autoencoder (mask ratio {pretrain.mask_ratio:g}, {pretrain.masking} masking), pretrained on "
        f"{data.shards} without labels, clips (B, 3, {data.num_frames}, {data.crop_size}, {data.crop_size}). "
        f"Pretraining run {run_id}."
    )
    how = (
        f"Fine-tune: model.name={config.model.name}, model.init_from=models:/{pretrain.model_name}@"
        f"{pretrain.alias} (a new head; another frame count or crop size resizes the position tables). "
        "Served, it answers one embedding per video."
    )
    return f"{what}\n\n{how}\n"


def _decide_promotion(
    client: MlflowClient, registry: RegistryConfig, metric: str, score: float, split_tag: str
) -> tuple[bool, str]:
    try:
        champion = client.get_model_version_by_alias(registry.model_name, registry.champion_alias)
    except MlflowException:
        return True, "no champion yet: the first version above the floor"
    if champion.tags.get(SPLIT_TAG) != split_tag:
        return False, f"champion v{champion.version} was evaluated on another split or views; not comparable"
    tag = champion.tags.get(METRIC_TAG.format(metric))
    if tag is None:
        return False, f"champion v{champion.version} has no {metric} to compare; not comparable"
    best = float(tag)
    better = score > best if registry.greater_is_better else score < best
    verdict = "beats" if better else "does not beat"
    return better, f"{metric} {score:.4f} {verdict} champion v{champion.version} ({best:.4f})"


def _floor(registry: RegistryConfig, result: EvalResult) -> tuple[str, str, float | None, float, str]:
    """The floor a version must pass: (metric, setting, its value, chance, what chance is). Top-1 for
    a single-label model, whose chance is 1 / classes; mAP for a multi-label one, whose chance is the
    mean over classes of their share of the split's videos (what random scores reach)."""
    metrics = result.by_ensemble[result.primary]
    if isinstance(metrics, MultiLabelMetrics):
        shares = [count / max(metrics.num_videos, 1) for count in metrics.support if count]
        chance = sum(shares) / max(len(shares), 1)
        return "mean_ap", "min_map", registry.min_map, chance, "the classes' mean share of the videos"
    classes = len(result.class_names)
    return "top1", "min_top1", registry.min_top1, 1 / classes, f"{classes} classes"


def _below_floor(registry: RegistryConfig, result: EvalResult) -> str | None:
    """Why a version gets no alias: its top-1 (mAP) is below `registry.min_top1` (`min_map`), or, when
    that is None, not better than chance."""
    metric, setting, floor, chance, why = _floor(registry, result)
    score = result.metrics()[metric]
    if floor is None:
        if score > chance:
            return None
        return f"not better than chance: {metric} {score:.4f} <= {chance:.4f} ({why}); registered without an alias"
    if score >= floor:
        return None
    return f"below registry.{setting}: {metric} {score:.4f} < {floor:.4f}; registered without an alias"


def register(
    model: nn.Module,
    config: PipelineConfig,
    result: EvalResult,
    *,
    client: MlflowClient,
    run_id: str,
) -> ModelVersionInfo:
    """Log `model` into run `run_id`, register it under `registry.model_name` and move the aliases."""
    registry, data, metric = config.registry, config.data, config.promotion_metric
    scores = result.metrics()
    if metric not in scores:
        raise ValueError(
            f"registry.metric: {metric} is not an evaluation metric here (one of {', '.join(scores)})"
        )
    score = scores[metric]
    model = model.eval().float().cpu()
    flops = count_flops(model, (1, 3, data.num_frames, data.crop_size, data.crop_size))
    run = client.get_run(run_id)
    train_seconds = (run.info.end_time - run.info.start_time) / 1000 if run.info.end_time else None
    card = model_card(config, result, flops.gflops, sum(p.numel() for p in model.parameters()), train_seconds)
    split_tag = f"{result.manifest_hash}:{result.views}"
    tags = {
        METRIC_TAG.format(metric): str(score),
        SPLIT_TAG: split_tag,
        "vidtx.gflops_per_view": f"{flops.gflops:.3f}",
    }
    with logging_into(client, run_id):
        card_file = {CARD_FILE: f"# {registry.model_name}\n\n{card}"}
        # the logged model is named as the registered one
        info = log_video_model(model, config, result.class_names, registry.model_name, card_file)
    with mlflow_uris(client.tracking_uri), _without_mlflow_prints():
        version = mlflow.register_model(info.model_uri, registry.model_name, tags=tags).version
    # the registry's pages show a description as it is written: the card without code marks
    client.update_model_version(registry.model_name, version, description=card.replace("`", ""))
    below_floor = _below_floor(registry, result)
    promote, reason = (
        (False, below_floor) if below_floor else _decide_promotion(client, registry, metric, score, split_tag)
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


def register_encoder(
    encoder: nn.Module, config: PipelineConfig, *, client: MlflowClient, run_id: str
) -> ModelVersionInfo:
    """Log a pretraining's `encoder` (decoder dropped) into its run `run_id`, register it under
    `pretrain.model_name` and move `pretrain.alias` to it: the newest pretraining is the one a fine-tune's
    `models:/<name>@<alias>` starts from. Its lineage: the version's run, and the tags of that run
    (the data's manifest hash, the git commit)."""
    pretrain = config.pretrain
    encoder = encoder.eval().float().cpu()
    card = encoder_card(config, sum(p.numel() for p in encoder.parameters()), run_id)
    run = client.get_run(run_id)
    tags = {OBJECTIVE_TAG: "masked_autoencoding"} | {
        tag: run.data.tags[tag] for tag in (MANIFEST_HASH_TAG,) if tag in run.data.tags
    }
    with logging_into(client, run_id):
        info = log_video_model(
            encoder, config, None, pretrain.model_name, {CARD_FILE: f"# {pretrain.model_name}\n\n{card}"}
        )
    with mlflow_uris(client.tracking_uri), _without_mlflow_prints():
        version = mlflow.register_model(info.model_uri, pretrain.model_name, tags=tags).version
    client.update_model_version(pretrain.model_name, version, description=card)
    client.set_registered_model_alias(pretrain.model_name, pretrain.alias, version)
    reason = f"the newest pretraining gets alias {pretrain.alias}"
    logger.info("registered the encoder %s v%s (%s)", pretrain.model_name, version, pretrain.alias)
    return ModelVersionInfo(
        pretrain.model_name,
        str(version),
        f"models:/{pretrain.model_name}/{version}",
        [pretrain.alias],
        False,
        reason,
        run_id,
    )


def load_registered_model(model_uri: str, tracking_uri: str | None = None) -> ServedVideoModel:
    """`models:/<name>@<alias>` (or `/<version>`) as the served model, a classifier or a pretrained
    encoder: its network (`.module`), config and class names (None for an encoder), read from the
    model's artifacts without MLflow's pyfunc loader."""
    uris = mlflow_uris(tracking_uri) if tracking_uri else contextlib.nullcontext()
    with uris, tempfile.TemporaryDirectory() as directory:
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=model_uri, dst_path=directory))
        return read_video_model(local)


class RegisteredModelNotFoundError(ValueError):
    """The registered model is not in the registry that was looked at; the message names its URI."""


def _local_store(uri: str) -> Path | None:
    """The database file or folder of a local tracking store (sqlite:///, file:, a path), else None."""
    if (database := sqlite_file(uri)) is not None:
        return database
    parsed = urlparse(uri)
    return Path(parsed.path) if parsed.scheme in ("", "file") else None


def resolve_version(model_uri: str, tracking_uri: str) -> str:
    """`models:/<name>@<alias>` as `models:/<name>/<version>` (the version the alias names now), or
    RegisteredModelNotFoundError naming the registry; a local store that does not exist is reported,
    not created."""
    store = _local_store(tracking_uri)
    if store is not None and not store.exists():
        raise RegisteredModelNotFoundError(
            f"{model_uri}: no MLflow registry at {tracking_uri} ({store.absolute()} does not exist); "
            f"{POINT_ELSEWHERE}"
        )
    name, _, alias = model_uri.removeprefix("models:/").partition("@")
    if not alias:
        return model_uri
    try:
        with mlflow_uris(tracking_uri):
            version = MlflowClient().get_model_version_by_alias(name, alias).version
    except MlflowException as err:
        reason = err.message.strip().splitlines()[0]
        raise RegisteredModelNotFoundError(
            f"{model_uri}: not found in the MLflow registry at {tracking_uri} ({reason}); {POINT_ELSEWHERE}"
        ) from err
    return f"models:/{name}/{version}"
