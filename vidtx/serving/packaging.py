"""What is logged as a registered model, and the network read back from it without MLflow's loader.

A pyfunc model (MLflow's "models from code": `pyfunc_model.py` names `VideoClassifier`, a pretrained
encoder's `pyfunc_encoder.py` names `VideoEncoder`) with
- artifacts: the weights as a vidtx checkpoint (`vidtx.models.load_checkpoint` rebuilds the network),
  the pipeline config it was trained with (the preprocessing: frames, sampling, crop size, mean / std,
  views) and a classifier's class names;
- code: a copy of the `vidtx` package, so the model loads where vidtx is not installed;
- a signature (a binary column `video`, params `num_clips`, `num_crops` and a classifier's `top_k` and
  `embedding`,
  the output columns),
  an input example (a small MP4 made here) that must pass `mlflow.models.validate_serving_input`, and
  pip requirements pinned to the versions installed here.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
from mlflow.models import ModelSignature, convert_input_example_to_serving_input, validate_serving_input
from mlflow.models.model import ModelInfo
from mlflow.types import ColSpec, ParamSchema, ParamSpec, Schema
from mlflow.types.schema import Array
from torch import nn

import vidtx
from vidtx.config import PipelineConfig, dump_config
from vidtx.media.encode import encode_mp4
from vidtx.models import save_checkpoint
from vidtx.serving.classifier import DEFAULT_TOP_K, VideoClassifier
from vidtx.serving.encoder import VideoEncoder
from vidtx.serving.video_model import INPUT_COLUMN, ServedVideoModel

CLASSIFIER_CODE = Path(__file__).with_name("pyfunc_model.py")
ENCODER_CODE = Path(__file__).with_name("pyfunc_encoder.py")
# what the classifier imports, beyond the standard library and vidtx, and nothing else
# (tests/test_serving.py checks both ways)
SERVING_DISTRIBUTIONS = (
    "mlflow",
    "torch",
    "numpy",
    "pandas",
    "pyarrow",
    "pydantic",
    "PyYAML",
    "av",
    "decord",
)


class InvalidServingInputError(RuntimeError):
    """The model just logged does not answer its own input example as `mlflow models serve` would."""


def pip_requirements() -> list[str]:
    """The serving distributions pinned to what is installed (torch without its local `+cpu` label)."""
    return [f"{name}=={version(name).split('+')[0]}" for name in SERVING_DISTRIBUTIONS]


OUTPUT_SPECS = {
    "label": ColSpec("string", "label", required=False),
    "score": ColSpec("double", "score", required=False),
    "top_k_labels": ColSpec(Array("string"), "top_k_labels"),
    "top_k_scores": ColSpec(Array("double"), "top_k_scores"),
    "labels": ColSpec(Array("string"), "labels", required=False),  # multi-label models only
    "label_scores": ColSpec(Array("double"), "label_scores", required=False),
    "embedding": ColSpec(Array("double"), "embedding", required=False),
    "error": ColSpec("string", "error", required=False),
}


PARAM_TYPES = ((bool, "boolean"), (int, "long"), (float, "double"))  # bool first: a bool is an int


def signature(
    served: type[ServedVideoModel], default_params: dict[str, int | bool | float]
) -> ModelSignature:
    outputs = [OUTPUT_SPECS[column] for column in served.OUTPUT_COLUMNS]
    params = [
        ParamSpec(k, next(name for kind, name in PARAM_TYPES if isinstance(v, kind)), v)
        for k, v in default_params.items()
    ]
    return ModelSignature(Schema([ColSpec("binary", INPUT_COLUMN)]), Schema(outputs), ParamSchema(params))


def example_video(config: PipelineConfig, seed: int = 0) -> bytes:
    """A short MP4 of noise at the model's crop size: the input example (any decodable video works)."""
    size = config.data.crop_size + config.data.crop_size % 2  # H.264 needs even sides
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 256, (config.data.num_frames, size, size, 3), dtype=np.uint8)
    return encode_mp4(frames, fps=8)


def _code_copy(folder: Path) -> Path:
    """The vidtx package as source, without byte-code: the model's `code/vidtx`."""
    target = folder / "vidtx"
    shutil.copytree(Path(vidtx.__file__).parent, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


@contextlib.contextmanager
def _sys_path_kept() -> Iterator[None]:
    """MLflow's loader puts a model's code folder (here a temporary one) first on sys.path for good;
    checking a model in this process must not leave it there."""
    saved = list(sys.path)
    try:
        yield
    finally:
        sys.path[:] = saved


def log_video_model(
    module: nn.Module,
    config: PipelineConfig,
    class_names: list[str] | None,
    name: str,
    extra_files: dict[str, str],
) -> ModelInfo:
    """Log `module` into the active MLflow run as model `name`: a classifier of `class_names`, or
    (None) a pretrained encoder; with `extra_files` (file name -> text, e.g. the model card) beside its
    artifacts. Raise InvalidServingInputError when the logged model does not answer its input example."""
    served, code = (VideoEncoder, ENCODER_CODE) if class_names is None else (VideoClassifier, CLASSIFIER_CODE)
    params = {"num_clips": config.eval.num_clips, "num_crops": config.eval.num_crops}
    if class_names is not None:
        params = {"top_k": DEFAULT_TOP_K} | params | {"embedding": False}
    frame = pd.DataFrame({INPUT_COLUMN: [example_video(config)]})
    example = frame if class_names is None else (frame, {"top_k": 1})
    files = served.ARTIFACT_FILES
    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory)
        save_checkpoint(module.float().cpu(), folder / files["weights"])
        texts = {files["config"]: dump_config(config)}
        if class_names is not None:
            texts[files["class_names"]] = json.dumps(class_names)
        for file_name, text in (texts | extra_files).items():
            (folder / file_name).write_text(text)
        with _sys_path_kept():  # log_model loads the model to check the example (a warning if not)
            info = mlflow.pyfunc.log_model(
                name=name,
                python_model=code,
                artifacts={key: str(folder / file_name) for key, file_name in files.items()}
                | {Path(file_name).stem: str(folder / file_name) for file_name in extra_files},
                code_paths=[str(_code_copy(folder / "code"))],
                signature=signature(served, params),
                input_example=example,
                pip_requirements=pip_requirements(),
            )
    check_serving_input(info.model_uri, convert_input_example_to_serving_input(example))
    return info


def check_serving_input(model_uri: str, serving_input: str) -> None:
    """What `mlflow models serve` would answer to `serving_input` must be a prediction without error.
    (MLflow's own check while logging only logs a warning.)"""
    with warnings.catch_warnings(), _sys_path_kept():
        warnings.simplefilter(
            "ignore", FutureWarning
        )  # deprecated for mlflow.models.predict, which builds an env
        try:
            answer = validate_serving_input(model_uri, serving_input)
        except Exception as err:  # MLflow raises whatever the model or its input parsing raised
            raise InvalidServingInputError(f"{model_uri} cannot answer its input example: {err}") from err
    errors = [e for e in answer["error"] if e is not None]
    if errors:
        raise InvalidServingInputError(f"{model_uri} could not read its input example: {errors[0]}")


def read_video_model(model_folder: Path) -> ServedVideoModel:
    """The classifier, or pretrained encoder, of a downloaded model (its network in `.module`), read
    without the pyfunc loader: a classifier's artifacts hold its class names, an encoder's do not."""
    artifacts = model_folder / "artifacts"
    weights = VideoClassifier.ARTIFACT_FILES["weights"]
    if not (artifacts / weights).is_file():
        raise ValueError(
            f"{model_folder} is not a vidtx video model (no artifacts/{weights}): "
            "a model registered by an earlier vidtx (pytorch flavor); register it again"
        )
    served = (
        VideoClassifier
        if (artifacts / VideoClassifier.ARTIFACT_FILES["class_names"]).is_file()
        else VideoEncoder
    )
    return served.from_artifacts(artifacts)
