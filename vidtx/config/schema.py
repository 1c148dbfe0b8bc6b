"""The pipeline config: every section of the one typed schema, from data to the model registry.

Every entry point (the `vidtx` CLI, the Prefect flows' parameters, the Ray workers' payload) takes
these pydantic models. Unknown keys are rejected and assignments are validated. The schema imports
nothing of vidtx but itself: what a section names elsewhere (a model preset, a shard folder) is
checked where it is used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from vidtx.config.base import StrictModel
from vidtx.config.data import DataConfig, ShardConfig, SynthConfig
from vidtx.config.export import ExportConfig
from vidtx.config.pretrain import PretrainConfig
from vidtx.config.sweep import SweepConfig, with_values
from vidtx.config.training import ModelConfig, TrainConfig
from vidtx.locations import StorageLocation

NO_SUCH_SETTING = "no such setting"
Ensemble = Literal["logits_sum", "prob_mean"]
ViewAggregation = Literal["mean", "max"]
EvalWeights = Literal["auto", "ema", "raw"]


class EvalConfig(StrictModel):
    """`eval`: multi-view evaluation of a trained model on one split.

    Read by the evaluate stage (which checkpoint, split, views, ensemble, batching, Ray workers);
    prediction reuses `num_clips` and `num_crops`.
    """

    checkpoint: str | None = Field(
        None, description="Checkpoint dir or models:/ URI (None: the training result)."
    )
    split: str = Field("test", description="The split evaluated (its shards must exist).")
    num_clips: int = Field(1, ge=1, description="Temporal views per video.")
    num_crops: int = Field(3, ge=1, le=3, description="Spatial views per clip (1: centre; 3: 3-crop).")
    ensemble: Ensemble = Field("logits_sum", description="Primary way to combine views (both are reported).")
    view_aggregation: ViewAggregation = Field(
        "mean",
        description="Multi-label models: how a video's per-view class probabilities (sigmoids) are combined, "
        "mean or max (both are reported; this one decides model promotion).",
    )
    threshold: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="Multi-label models: the probability from which a class is predicted (F1 here; the "
        "labels the served model and `vidtx predict` return, unless predict.threshold says otherwise).",
    )
    batch_size: int = Field(8, ge=1, description="Videos per evaluation batch (each with all its views).")
    num_workers: int = Field(1, ge=1, description="Ray workers for evaluation (1: in one process).")
    weights: EvalWeights = Field(
        "auto",
        description="Which weights of a Ray checkpoint are evaluated and registered: ema (train.ema's "
        "average), raw, or auto (the average where the run kept one).",
    )


class RegistryConfig(StrictModel):
    """`registry`: the MLflow registered model and its aliases.

    Read by the register stage: every new version whose top-1 (a multi-label model's mAP) reaches
    `min_top1` (`min_map`; default: better than chance) gets `challenger_alias`; `champion_alias`
    moves to it when it beats the champion on `metric` measured on the same split and views. A
    version below the floor is registered without an alias.
    """

    model_name: str = Field("vidtx-xvit", description="MLflow registered model name.")
    metric: str | None = Field(
        None,
        description="Evaluation metric that decides champion promotion (None: top1, or mean_ap for a "
        "multi-label model).",
    )
    greater_is_better: bool = Field(True, description="Whether a higher `metric` is better.")
    champion_alias: str = Field("champion", description="Alias of the best version so far.")
    challenger_alias: str = Field("challenger", description="Alias of the newest version above the floor.")
    min_top1: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description=(
            "Top-1 accuracy a version needs to get an alias (challenger, then maybe champion); None: "
            "better than chance (1 / number of classes). Top-1 whatever `metric` is: its chance level is known."
        ),
    )
    min_map: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Multi-label models: the mean average precision a version needs to get an alias; None: "
        "better than chance (the mean over classes of their share of the split's videos, what random "
        "scores reach).",
    )
    export_onnx: bool = Field(
        False,
        description="Also export each new version to ONNX (the `export` section), checked in onnxruntime, "
        "and log the file and its largest logit difference to the version.",
    )


class TrackingConfig(StrictModel):
    """`tracking`: the MLflow server and experiment that every stage logs to or reads from.

    Read by training (run creation and resume), evaluation (finding the training run), registration
    and the flows' links to the MLflow UI.
    """

    tracking_uri: str | None = Field(
        None, description="MLflow URI. MLFLOW_TRACKING_URI wins; None: sqlite:///WORKDIR/mlflow.db."
    )
    experiment: str = Field("vidtx", description="MLflow experiment of the runs.")
    ui_url: str | None = Field(
        None,
        description="MLflow UI base URL for links (None: the tracking URI when it is http(s), "
        "else the local UI that `make ui` serves).",
    )


class StorageConfig(StrictModel):
    """`storage`: the S3 endpoint and region of `s3://` locations, when not the environment's.

    Applied by every entry point (the CLI, the flows that take the whole config) to its process's
    environment, as `AWS_ENDPOINT_URL_S3` and `AWS_DEFAULT_REGION`: the storage client, Ray's storage
    and every process started afterwards (shard writers, Ray workers) read them there. Credentials
    have no field: a config is logged and recorded, so they stay in the environment.
    """

    endpoint_url: str | None = Field(
        None, description="S3 endpoint URL (None: AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, else AWS's)."
    )
    region: str | None = Field(None, description="S3 region (None: AWS_DEFAULT_REGION, else us-east-1).")


class PredictConfig(StrictModel):
    """`predict`: scoring videos with a registered model (`vidtx predict`, the `batch-predict` flow).

    The views are the model's own (`eval.num_clips`, `eval.num_crops` of its registered config)
    unless overridden too.
    """

    output: StorageLocation | None = Field(
        None, description="Write the predictions here: a .parquet or .csv file, here or in a bucket."
    )
    top_k: int = Field(5, ge=1, description="Classes kept per video (top_k_labels, top_k_scores).")
    threshold: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Multi-label models: every class whose probability reaches this is returned (labels, "
        "scores); None: the model's own eval.threshold.",
    )
    window: float | None = Field(
        None,
        gt=0,
        description="Score long videos window by window: windows of this many seconds, a row each (start, "
        "end), then the video's row from their mean (None: one row from views over the whole video).",
    )
    hop: float | None = Field(
        None,
        gt=0,
        description="Seconds from one window's start to the next (None: predict.window, no overlap).",
    )
    embeddings: bool = Field(
        False,
        description="Also write each video's pre-logits embedding (the mean over its views) as column "
        "`embedding`: in Parquet a list of float32 (its length in the field's metadata), ready for a "
        "vector index.",
    )
    batch_size: int = Field(8, ge=1, description="Videos per batch handed to a model replica.")
    ray_address: str | None = Field(
        None,
        description="Score as a Ray Data job on this Ray cluster ('local': a Ray started here, 'auto', "
        "host:port); None: in this process.",
    )
    replicas: int | None = Field(
        None,
        ge=1,
        description="Model replicas (Ray actors) on the cluster (None: one per GPU, else per node).",
    )

    @model_validator(mode="after")
    def _hop_goes_with_a_window(self) -> PredictConfig:
        if self.hop is not None and self.window is None:
            raise ValueError(f"hop {self.hop:g} without a window: set predict.window too")
        return self


class PipelineConfig(StrictModel):
    """The whole pipeline: synthesise (optional), shard, train, evaluate, register.

    The root config every entry point takes (CLI, Prefect flows, Ray workers); each stage reads its
    own sections. `name` labels the run (the default training run name derives from it).
    """

    name: str = Field("demo", description="Names the run: the training run name derives from it.")
    workdir: Path = Field(Path("runs"), description="Where local state (MLflow DB, Ray results) lives.")
    synth: SynthConfig | None = Field(None, description="Generate a synthetic dataset first (None: skip).")
    shard: ShardConfig = Field(default_factory=ShardConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    registry: RegistryConfig = Field(default_factory=RegistryConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    predict: PredictConfig = Field(default_factory=PredictConfig)
    pretrain: PretrainConfig = Field(default_factory=PretrainConfig)
    export: ExportConfig = Field(default_factory=ExportConfig)
    sweep: SweepConfig = Field(default_factory=SweepConfig)  # last: its check reads every other section

    @field_validator("sweep")
    @classmethod
    def _space_fits_the_schema(cls, sweep: SweepConfig, info: ValidationInfo) -> SweepConfig:
        """Every key of the space is a setting, and each value its distribution can give is one the
        setting accepts (checked on the config as a trial would have it)."""
        if not sweep.space or set(cls.model_fields) - {"sweep"} - set(info.data):
            return sweep  # nothing to check, or another section failed (its error is reported)
        base = cls.model_construct(**info.data)
        for key, distribution in sweep.space.items():
            for value in distribution.candidates():
                try:
                    base.for_trial({key: value})
                except ValueError as err:
                    shown = "" if str(err) == NO_SUCH_SETTING else f"{value!r}: "
                    raise ValueError(f"space.{key}: {shown}{err}") from None
        return sweep

    @model_validator(mode="after")
    def _losses_of_the_task(self) -> PipelineConfig:
        """Focal loss and class weights are single-label options (a multi-label loss is a sigmoid per
        class; its imbalance is each class's own positives against negatives)."""
        if self.model.task == "multi_label":
            for field, value, off in (
                ("loss", self.train.loss, "cross_entropy"),
                ("class_weights", self.train.class_weights, "none"),
            ):
                if value != off:
                    raise ValueError(
                        f"train.{field}: {value} is for single-label models; model.task is multi_label "
                        f"(set train.{field}={off})"
                    )
        return self

    @model_validator(mode="after")
    def _generated_label_sets_are_read_as_such(self) -> PipelineConfig:
        """Videos generated with several objects carry label sets joined by "|", which sharding must
        split (or it would read "growing|moving_up" as one class)."""
        if self.synth is not None and self.synth.objects_per_video > 1 and self.shard.label_separator != "|":
            raise ValueError(
                f"shard.label_separator: {self.shard.label_separator!r}; synth.objects_per_video "
                f"{self.synth.objects_per_video} writes label sets joined by '|': set shard.label_separator='|'"
            )
        return self

    @property
    def promotion_metric(self) -> str:
        """The evaluation metric that decides champion promotion (`registry.metric`, by default the
        task's headline: top1, or mean_ap for a multi-label model)."""
        default = "mean_ap" if self.model.task == "multi_label" else "top1"
        return self.registry.metric or default

    def for_trial(self, values: dict[str, Any]) -> PipelineConfig:
        """This config with the dotted keys of `values` set, as one trial of its sweep trains it (no
        sweep section of its own); ValueError names the first field that refuses its value."""
        data = with_values(self.model_dump(mode="json", exclude={"sweep"}), values)
        try:
            return PipelineConfig.model_validate(data)
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(map(str, first["loc"]))
            message = NO_SUCH_SETTING if first["type"] == "extra_forbidden" else first["msg"]
            named = "" if where in values else f"{where}: "  # the key itself needs no second mention
            raise ValueError(f"{named}{message.removeprefix('Value error, ')}") from None

    def for_run(self, run_name: str) -> PipelineConfig:
        """A copy that names its training run: the stages after training find the run by this name."""
        config = self.model_copy(deep=True)
        config.train.run_name = run_name
        return config
