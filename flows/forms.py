"""Each flow's run form (`vidtx.config.forms`): a config file, the settings a person changes most for
that flow, and free overrides; and the config a form describes, or the Failed state that says in one
line why it cannot be used, before anything starts."""

from __future__ import annotations

from prefect import get_run_logger
from prefect.client.schemas.objects import State
from prefect.states import Failed
from pydantic import Field

from vidtx import storage
from vidtx.config import ConfigError, PipelineConfig, PredictConfig
from vidtx.config.fields import schema_field
from vidtx.config.forms import Form, RunForm, run_form
from vidtx.model_factory import check_model_config, check_pretrain_config

DEMO_CONFIG = "configs/experiments/demo.yaml"
FLOW_RUN_ID = "the flow run's id (a retry of the flow run resumes it)"

ShardForm = run_form(
    "ShardForm",
    "Shard a video dataset into WebDataset tars, generating it first when the config has a `synth` section.",
    source="shard.source",
    output="shard.output",
    executor="shard.executor",
)
TrainForm = run_form(
    "TrainForm",
    "One training run on Ray Train + DeepSpeed: the config's data, model and recipe.",
    max_steps="train.max_steps",
    lr="train.optimizer.lr",
    num_workers="train.num_workers",
    training_run="train.run_name",
    empty={"training_run": f"the config's name and {FLOW_RUN_ID}"},
)
EvaluateForm = run_form(
    "EvaluateForm",
    "Multi-view evaluation of a trained model (by default the best checkpoint of the run named).",
    training_run="train.run_name",
    checkpoint="eval.checkpoint",
    split="eval.split",
    num_clips="eval.num_clips",
    num_crops="eval.num_crops",
)
RegisterForm = run_form(
    "RegisterForm",
    "A trained model evaluated, registered in MLflow and its aliases moved.",
    training_run="train.run_name",
    checkpoint="eval.checkpoint",
    model_name="registry.model_name",
)
PipelineForm = run_form(
    "PipelineForm",
    "The whole pipeline: synthesise (with a `synth` section), shard, train, evaluate, register.",
    name="name",
    max_steps="train.max_steps",
    lr="train.optimizer.lr",
    num_workers="train.num_workers",
)
PretrainForm = run_form(
    "PretrainForm",
    "Self-supervised pretraining of the config's network as a masked autoencoder (VideoMAE), labels ignored.",
    max_steps="train.max_steps",
    mask_ratio="pretrain.mask_ratio",
    lr="train.optimizer.lr",
    num_workers="train.num_workers",
    training_run="train.run_name",
    empty={"training_run": f"the config's name, -pretrain- and {FLOW_RUN_ID}"},
)
SweepForm = run_form(
    "SweepForm",
    "A hyperparameter sweep: trials of the config's training, weak ones stopped early, the best registered.",
    num_trials="sweep.num_trials",
    max_concurrent="sweep.max_concurrent",
    space="sweep.space",
    sweep_name="sweep.name",
    empty={"sweep_name": f"the config's name, -sweep- and {FLOW_RUN_ID}"},
)


class PredictForm(Form):
    """Videos scored by a registered model into a predictions table (a .parquet or .csv file)."""

    REQUIRED = ("videos", "output")
    videos: list[str] = Field(
        description="Videos to score: files, folders, CSV lists of videos, or bucket prefixes (s3://, gs://)."
    )
    model: str = Field(
        "models:/vidtx-xvit-demo@champion",
        description="The registered model: models:/NAME@ALIAS (resolved to one version) or models:/NAME/VERSION.",
    )
    output: str = Field(description=schema_field("predict.output").description)
    top_k: int = Field(5, ge=1, description=schema_field("predict.top_k").description)
    tracking_uri: str | None = Field(
        None, description="The MLflow registry the model is in. Empty: MLFLOW_TRACKING_URI, else the demo's."
    )
    overrides: list[str] = Field(
        default_factory=list,
        description="Settings of the model's own config for this run (`eval.num_crops=1`) and of how it "
        "scores (`predict.batch_size=16`, `predict.ray_address=auto`), as `vidtx predict --set` takes them.",
    )

    def predict(self) -> PredictConfig:
        return PredictConfig(output=self.output, top_k=self.top_k)


def config_of(form: RunForm, *, model: bool = True, pretraining: bool = False) -> PipelineConfig | State:
    """The config `form` describes, its model checked against the zoo (unless the flow builds none;
    as a masked autoencoder's encoder when `pretraining`) and its storage settings made this
    process's; a config that cannot be used is a Failed state whose message is `vidtx`'s one line."""
    try:
        config = form.pipeline()
        if pretraining:
            check_pretrain_config(config)
        elif model:
            check_model_config(config)
    except (ConfigError, OSError) as err:
        line = f"error: {err}"
        get_run_logger().error(line)
        return Failed(message=line)
    storage.configure(config.storage.endpoint_url, config.storage.region)  # before any s3:// location
    return config
