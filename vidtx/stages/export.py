"""The export stage: a trained network as ONNX, checked in onnxruntime (`vidtx.serving.onnx_export`).

`export_trained(config, source)` exports the training run's best checkpoint, a checkpoint given, a
`.pt` file, or a registered model (`models:/<name>@<alias>` or `/<version>`). A registered model is
exported with the config it was registered with (frames, crop size, normalisation), and the version
gets the file (an artifact of its run under `onnx/`) and the figure (tags `vidtx.onnx.*`); the register
stage does the same for each new version when `registry.export_onnx` is on.
"""

from __future__ import annotations

from pathlib import Path

from vidtx.config import ConfigError, PipelineConfig
from vidtx.results import ModelVersionInfo
from vidtx.serving.onnx_export import ExportResult, export_onnx
from vidtx.stages.trained_model import checkpoint_setting, find_trained_run
from vidtx.tracking.model_registry import load_registered_model, resolve_version
from vidtx.tracking.runs import connect, resolve_tracking_uri
from vidtx.train.starting_weights import readable_model

ONNX_TAG = "vidtx.onnx.{}"  # on a model version: max_abs_diff, tolerance, artifact


def output_path(config: PipelineConfig, name: str) -> Path:
    return Path(config.export.output or config.workdir / "export" / f"{name}.onnx")


def export_trained(config: PipelineConfig, source: str | None = None) -> ExportResult:
    """`vidtx export`: `source` (else `eval.checkpoint`, else the best checkpoint of `train.run_name`)
    as ONNX at `export.output`; a registered version also gets the file and its figure."""
    chosen = source or config.eval.checkpoint
    if chosen and chosen.startswith("models:/"):
        tracking_uri = resolve_tracking_uri(config)
        return export_version(config, resolve_version(chosen, tracking_uri), tracking_uri)
    checkpoint = chosen or find_trained_run(config).checkpoint
    module = readable_model(config, checkpoint, checkpoint_setting(config, source)).module
    return export_onnx(module, config, output_path(config, config.model.name))


def export_registered(config: PipelineConfig, version: ModelVersionInfo) -> ExportResult:
    """The register stage's export of the version it just registered (`registry.export_onnx`)."""
    return export_version(config, version.model_uri, resolve_tracking_uri(config))


def export_version(config: PipelineConfig, model_uri: str, tracking_uri: str) -> ExportResult:
    """Export registered version `model_uri` (`models:/<name>/<version>`) with its own config, and log
    the file into the version's run and the figure as the version's tags."""
    name, version = model_uri.removeprefix("models:/").split("/")
    registered = load_registered_model(model_uri, tracking_uri)
    if registered.class_names is None:
        raise ConfigError(f"{model_uri} is a pretrained encoder, not a classifier: fine-tune it, then export")
    exported_config = registered.config.model_copy(
        update={"export": config.export, "workdir": config.workdir}
    )
    result = export_onnx(registered.module, exported_config, output_path(config, f"{name}-v{version}"))
    client = connect(tracking_uri)
    run_id = client.get_model_version(name, version).run_id
    client.log_artifact(run_id, str(result.path), "onnx")
    tags = {
        "max_abs_diff": f"{result.max_abs_diff:.3g}",
        "tolerance": f"{result.tolerance:g}",
        "artifact": f"runs:/{run_id}/onnx/{result.path.name}",
    }
    for key, value in tags.items():
        client.set_model_version_tag(name, version, ONNX_TAG.format(key), value)
    return result
