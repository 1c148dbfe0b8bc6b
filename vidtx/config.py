"""The one typed configuration schema of vidtx.

Every entry point (the `vidtx` CLI, the Prefect flows, the Ray workers) takes these pydantic models.
YAML files in `configs/` validate against `PipelineConfig`; a file may `include:` other files (paths
relative to itself), which are deep-merged first, so `configs/model/*.yaml` and
`configs/deepspeed/*.yaml` are fragments that experiments compose. Unknown keys are rejected, and
every error names the file (or the `--set` override) and the dotted field.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator


class ConfigError(ValueError):
    """A configuration could not be loaded; the message names the source and the field."""


class StrictModel(BaseModel):
    """Base for every config section: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    def with_absolute_paths(self) -> Self:
        """A copy whose relative paths are absolute against the current directory, for processes
        that run elsewhere: a Ray worker starts in its own session folder, not the driver's."""
        return self.model_validate(_absolute_paths(self.model_dump()))


def _absolute_paths(value: Any) -> Any:
    if isinstance(value, Path):
        return value.expanduser().absolute()
    if isinstance(value, dict):
        return {key: _absolute_paths(item) for key, item in value.items()}
    return value


AttentionImpl = Literal["auto", "sdpa", "math"]
Precision = Literal["bf16", "fp16", "fp32"]
DatasetFormat = Literal["folder", "kinetics", "ssv2", "csv"]
SamplingMode = Literal["segment", "dense"]
Ensemble = Literal["logits_sum", "prob_mean"]


class ModelConfig(StrictModel):
    """Which network to build. Frames, crop size and classes come from the data, not from here."""

    name: str = Field("xvit_tiny", description="Preset from the model registry (`vidtx models`).")
    attention_impl: AttentionImpl = Field(
        "auto", description="auto/sdpa: torch scaled_dot_product_attention (fused); math: explicit softmax."
    )
    drop_path_rate: float = Field(0.0, ge=0.0, lt=1.0, description="Stochastic depth, linearly over depth.")
    head_dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout before the classifier.")
    pretrained: str | None = Field(
        None, description="Image-ViT state dict (timm key names) to initialise the spatial backbone."
    )
    options: dict[str, int | float | str | bool] = Field(
        default_factory=dict,
        description="Extra keyword arguments for the preset, e.g. shift_div, mix_layout, temporal_head.",
    )

    @field_validator("name")
    @classmethod
    def _known_preset(cls, name: str) -> str:
        from vidtx.models.registry import list_models  # lazy: importing the config must not import torch

        if name not in (valid := list_models()):
            raise ValueError(f"unknown model preset {name!r}; valid: {', '.join(valid)}")
        return name


class ReencodeConfig(StrictModel):
    """Training-friendly re-encode: small frames and short GOPs make sparse sampling cheap to decode."""

    short_side: int = Field(256, ge=16, description="Resize so the shorter side has this many pixels.")
    fps: float | None = Field(None, gt=0, description="Resample to this frame rate (None keeps it).")
    max_seconds: float | None = Field(None, gt=0, description="Cut clips to at most this long.")
    keyframe_interval: int = Field(16, ge=1, description="GOP size: a keyframe every N frames.")
    crf: int = Field(23, ge=0, le=51, description="libx264 constant rate factor.")


class SynthConfig(StrictModel):
    """A generated dataset of real MP4 files whose class only the frame order tells."""

    output: Path = Field(Path("data/synthetic"), description="Folder for videos + annotations.csv.")
    videos_per_class: dict[str, int] = Field(
        default_factory=lambda: {"train": 48, "val": 12, "test": 12},
        description="Videos per class in each split.",
    )
    classes: list[str] | None = Field(None, description="Subset of motion classes (None: all).")
    num_frames: int = Field(16, ge=2, description="Frames per video.")
    size: int = Field(64, ge=16, multiple_of=2, description="Frame height and width in pixels (even: H.264).")
    fps: int = Field(12, ge=1)
    seed: int = 0


class ShardConfig(StrictModel):
    """Turning a video dataset into WebDataset tars."""

    source: Path = Field(
        Path("data/synthetic/annotations.csv"), description="Dataset root or annotation file."
    )
    format: DatasetFormat = Field("csv", description="Layout of the source dataset.")
    video_root: Path | None = Field(
        None, description="Where annotation formats find the videos (None: the annotation file's folder)."
    )
    output: Path = Field(Path("data/shards"), description="Folder for <split>-NNNNNN.tar and manifests.")
    splits: list[str] | None = Field(None, description="Splits to shard (None: every split in the source).")
    max_samples_per_shard: int = Field(1000, ge=1, le=1_000_000)
    max_bytes_per_shard: int = Field(
        1_000_000_000, ge=1_000_000, description="Cap on the source video bytes packed into one shard."
    )
    processes: int = Field(2, ge=1, description="Parallel probe/encode processes.")
    seed: int = Field(0, description="Seeds the (deterministic) sample order.")
    min_frames: int = Field(4, ge=1, description="Shorter videos are rejected.")
    max_reject_fraction: float = Field(
        0.2, ge=0.0, le=1.0, description="Fail the job when more than this fraction of videos is bad."
    )
    reencode: ReencodeConfig | None = Field(
        None, description="Re-encode videos (None: copy bytes as they are)."
    )
    classes: list[str] | None = Field(
        None, description="The label set (None: every label in the annotations); other labels are rejects."
    )
    probe_timeout_s: float = Field(
        600.0, gt=0, description="Per video: a probe (and re-encode) that takes longer is rejected."
    )


class DataConfig(StrictModel):
    """Reading shards into clip batches of shape (B, C, T, H, W)."""

    shards: Path = Field(Path("data/shards"), description="Folder written by `vidtx shard`.")
    train_split: str = "train"
    val_split: str = "val"
    num_frames: int = Field(8, ge=1, description="Frames per clip (T).")
    sampling: SamplingMode = Field("segment", description="segment: SSv2/TSN style; dense: Kinetics style.")
    frame_stride: int = Field(4, ge=1, description="Dense sampling: frames between sampled frames.")
    short_side: int = Field(256, ge=8, description="Decode-time resize of the shorter side.")
    crop_size: int = Field(224, ge=8, description="Spatial input size (H = W).")
    scale_range: tuple[float, float] = Field((0.4, 1.0), description="Random resized crop area fraction.")
    horizontal_flip: bool = Field(False, description="Off by default: it swaps left/right classes.")
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    num_workers: int = Field(1, ge=0, description="DataLoader worker processes per training worker.")
    decode_threads: int = Field(1, ge=0, description="decord threads per reader (0: auto).")
    shuffle_buffer: int = Field(64, ge=0)
    repeated_sampling: int = Field(1, ge=1, description="Clips drawn from one decoded video.")

    @field_validator("crop_size")
    @classmethod
    def _crop_fits(cls, crop_size: int, info: ValidationInfo) -> int:
        short_side = info.data.get("short_side")
        if short_side is not None and crop_size > short_side:
            raise ValueError(f"crop_size ({crop_size}) exceeds short_side ({short_side})")
        return crop_size

    @field_validator("scale_range")
    @classmethod
    def _scale_is_fraction(cls, scale_range: tuple[float, float]) -> tuple[float, float]:
        low, high = scale_range
        if not 0.0 < low <= high <= 1.0:
            raise ValueError(f"must satisfy 0 < low <= high <= 1, got {scale_range}")
        return scale_range


class OptimizerConfig(StrictModel):
    name: Literal["sgd", "adamw"] = "sgd"
    lr: float = Field(0.05, gt=0, description="Peak learning rate (after warm-up).")
    momentum: float = Field(0.9, ge=0, lt=1)
    nesterov: bool = True
    betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = Field(1e-4, ge=0, description="Not applied to norms, biases and embeddings.")


class ScheduleConfig(StrictModel):
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up from warmup_start_factor * lr.")
    warmup_start_factor: float = Field(0.1, gt=0, le=1)
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="Cosine decays to this fraction of lr.")


class ClusterConfig(StrictModel):
    address: str | None = Field(
        None,
        description="Ray cluster: http(s)://head:8265 submits a Ray Job; host:port or 'auto' connects. "
        "RAY_ADDRESS wins; None starts a local Ray.",
    )
    runtime_env: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra Ray runtime_env for a submitted job (env_vars, pip, py_modules); "
        "working_dir is vidtx's (it carries the resolved config).",
    )
    follow_logs: bool = Field(True, description="Stream a submitted job's logs until it ends.")


# DeepSpeed keys that typed TrainConfig fields own: setting them in `train.deepspeed` is an error.
DEEPSPEED_OWNED_KEYS = {
    "train_batch_size": "global_batch_size",
    "train_micro_batch_size_per_gpu": "micro_batch_size",
    "gradient_accumulation_steps": "global_batch_size",
    "gradient_clipping": "gradient_clipping",
    "bf16": "precision",
    "fp16": "precision",
    "optimizer": "optimizer",
    "scheduler": "schedule",
}


class TrainConfig(StrictModel):
    """Ray Train + DeepSpeed training."""

    run_name: str | None = Field(None, description="Names the Ray run; the same name resumes it.")
    storage_path: str = Field("runs/ray", description="Local folder or object-store URI for checkpoints.")
    num_workers: int = Field(2, ge=1, description="Ray Train workers (one per GPU on a GPU cluster).")
    use_gpu: bool = False
    cpus_per_worker: float = Field(1.0, gt=0)
    max_failures: int = Field(1, ge=0, description="Worker-group restarts from the latest checkpoint.")
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    max_steps: int = Field(100, ge=1, description="Optimizer steps in the whole run.")
    micro_batch_size: int = Field(4, ge=1, description="Clips per worker per forward pass.")
    global_batch_size: int | None = Field(
        None, ge=1, description="Clips per optimizer step over all workers (None: no accumulation)."
    )
    precision: Precision = "bf16"
    zero_stage: Literal[0, 1, 2, 3] = 1
    gradient_clipping: float = Field(1.0, ge=0, description="Max global grad norm (0: off).")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    label_smoothing: float = Field(0.0, ge=0, lt=1)
    mixup_alpha: float = Field(0.0, ge=0, description="Mixup Beta(alpha, alpha); 0 turns it off.")
    deepspeed: dict[str, Any] = Field(
        default_factory=dict, description="Deep-merged over the generated DeepSpeed config."
    )
    log_every: int = Field(10, ge=1)
    checkpoint_every: int = Field(50, ge=1, description="Steps between checkpoints (and one at the end).")
    keep_checkpoints: int = Field(2, ge=1, description="Latest checkpoints kept besides the best.")
    val_every: int = Field(50, ge=1, description="Steps between validation passes.")
    val_max_batches: int | None = Field(None, ge=1, description="Cap on validation batches per worker.")
    peak_tflops: float | None = Field(None, gt=0, description="Per-device peak for MFU (None: not shown).")
    seed: int = 0

    @property
    def gradient_accumulation_steps(self) -> int:
        if self.global_batch_size is None:
            return 1
        return self.global_batch_size // (self.micro_batch_size * self.num_workers)

    @field_validator("deepspeed")
    @classmethod
    def _no_owned_keys(cls, deepspeed: dict[str, Any]) -> dict[str, Any]:
        owned = {key: DEEPSPEED_OWNED_KEYS[key] for key in deepspeed if key in DEEPSPEED_OWNED_KEYS}
        if "stage" in deepspeed.get("zero_optimization", {}):
            owned["zero_optimization.stage"] = "zero_stage"
        if owned:
            fixes = ", ".join(f"{key} -> train.{field}" for key, field in owned.items())
            raise ValueError(f"set these through the typed fields instead: {fixes}")
        return deepspeed

    @field_validator("global_batch_size")
    @classmethod
    def _divisible_batch(cls, global_batch_size: int | None, info: ValidationInfo) -> int | None:
        micro, workers = info.data.get("micro_batch_size"), info.data.get("num_workers")
        if global_batch_size is not None and micro and workers and global_batch_size % (micro * workers):
            raise ValueError(
                f"{global_batch_size} is not a multiple of micro_batch_size x num_workers ({micro} x {workers})"
            )
        return global_batch_size


class EvalConfig(StrictModel):
    checkpoint: str | None = Field(
        None, description="Checkpoint dir or models:/ URI (None: the training result)."
    )
    split: str = "test"
    num_clips: int = Field(1, ge=1, description="Temporal views per video.")
    num_crops: int = Field(3, ge=1, le=3, description="Spatial views per clip (1: centre; 3: 3-crop).")
    ensemble: Ensemble = Field("logits_sum", description="Primary way to combine views (both are reported).")
    batch_size: int = Field(8, ge=1)
    num_workers: int = Field(1, ge=1, description="Ray workers for evaluation (1: in one process).")


class RegistryConfig(StrictModel):
    model_name: str = "vidtx-xvit"
    metric: str = Field("top1", description="Evaluation metric that decides champion promotion.")
    greater_is_better: bool = True
    champion_alias: str = "champion"
    challenger_alias: str = "challenger"


class TrackingConfig(StrictModel):
    tracking_uri: str | None = Field(
        None, description="MLflow URI. MLFLOW_TRACKING_URI wins; None: sqlite:///<workdir>/mlflow.db."
    )
    experiment: str = "vidtx"
    ui_url: str | None = Field(
        None,
        description="MLflow UI base URL for links (None: the tracking URI when it is http(s), "
        "else http://127.0.0.1:5000, where `make ui` serves it).",
    )


class PipelineConfig(StrictModel):
    """The whole pipeline: synthesise (optional) -> shard -> train -> evaluate -> register."""

    name: str = "demo"
    workdir: Path = Field(Path("runs"), description="Where local state (MLflow DB, Ray results) lives.")
    synth: SynthConfig | None = Field(None, description="Generate a synthetic dataset first (None: skip).")
    shard: ShardConfig = Field(default_factory=ShardConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    registry: RegistryConfig = Field(default_factory=RegistryConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)


# --------------------------------------------------------------------------------------------------
# Loading, overriding, dumping


def deep_merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    """Recursively merge `update` into a copy of `base` (mappings merge, everything else replaces)."""
    merged = copy.deepcopy(dict(base))
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _read_yaml(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Read a YAML mapping, resolving its `include:` list first (paths relative to the file)."""
    path = path.resolve()
    if path in seen:
        raise ConfigError(f"{path}: include cycle through {' -> '.join(map(str, seen))}")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except OSError as err:
        raise ConfigError(f"{path}: cannot read config ({err.strerror})") from err
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: invalid YAML ({err})".replace("\n", " ")) from err
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(raw).__name__}")
    includes = raw.pop("include", [])
    if isinstance(includes, str):
        includes = [includes]
    merged: dict[str, Any] = {}
    for include in includes:
        merged = deep_merge(merged, _read_yaml(path.parent / include, (*seen, path)))
    return deep_merge(merged, raw)


def _describe(detail: Mapping[str, Any], source: str, overrides: list[str]) -> str:
    """One problem as `origin: dotted.field: message`; the origin is the last override touching it."""
    loc = [str(part) for part in detail["loc"]]
    origin = source
    for override in reversed(overrides):
        keys = override.partition("=")[0].strip().split(".")
        shared = min(len(keys), len(loc))
        if keys[:shared] == loc[:shared]:
            origin = f"--set {override}"
            break
    message = detail["msg"].removeprefix("Value error, ")
    return f"{origin}: {'.'.join(loc) or '<root>'}: {message}"


def parse_override(override: str) -> tuple[list[str], Any]:
    """Split `a.b.c=value` into (["a", "b", "c"], value); the value is read as YAML (1 -> int)."""
    key, sep, text = override.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {override}: expected KEY=VALUE, e.g. train.optimizer.lr=0.05")
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        value = text
    return key.strip().split("."), value


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Apply dotted `KEY=VALUE` overrides to a raw config mapping (validated afterwards)."""
    result = copy.deepcopy(data)
    for override in overrides:
        keys, value = parse_override(override)
        node = result
        for depth, key in enumerate(keys[:-1]):
            child = node.get(key)
            if child is None:
                child = node[key] = {}
            elif not isinstance(child, dict):
                dotted = ".".join(keys[: depth + 1])
                raise ConfigError(f"--set {override}: {dotted} is a value, not a section")
            node = child
        node[keys[-1]] = value
    return result


def validate_config(
    data: Mapping[str, Any], source: str = "<config>", overrides: Iterable[str] = ()
) -> PipelineConfig:
    """Validate a raw mapping; errors name the source (file or override) and the dotted field."""
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as err:
        overrides = list(overrides)
        raise ConfigError("; ".join(_describe(d, source, overrides) for d in err.errors())) from None


def load_config(path: str | Path | None = None, overrides: Iterable[str] = ()) -> PipelineConfig:
    """Load a YAML file (or the built-in defaults when `path` is None) and apply `--set` overrides."""
    overrides = list(overrides)
    raw = _read_yaml(Path(path)) if path is not None else {}
    raw = apply_overrides(raw, overrides)
    return validate_config(raw, str(path) if path is not None else "<defaults>", overrides)


def dump_config(config: BaseModel) -> str:
    """The resolved config as YAML; `load_config` of this text gives the same config back."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
