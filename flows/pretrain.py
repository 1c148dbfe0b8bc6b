"""`pretrain-model`: masked-autoencoder pretraining on Ray Train + DeepSpeed, followed from Prefect.

The run is named after the flow run (unless `train.run_name` is set), so a retried flow run resumes it
from its checkpoint. Progress goes to a progress artifact and the flow's log while Ray trains; the
log ends with the run, its checkpoints, its MLflow link and the registered encoder (what a fine-tune's
`model.init_from` names).
"""

from __future__ import annotations

from prefect import flow, task
from prefect.client.schemas.objects import State
from prefect.runtime import flow_run

from flows.cancellation import cancellable, cancelled
from flows.forms import PretrainForm, config_of
from flows.train import flow_run_tags, follow_training, log_outcome
from vidtx.config import PipelineConfig
from vidtx.stages.pretrain import PretrainResult, pretrain


@task(retries=0)  # the flow run's own retry resumes instead
@cancellable
def run_pretraining(config: PipelineConfig) -> PretrainResult:
    with follow_training(config) as progress:
        return pretrain(config, tags=flow_run_tags(), progress=progress)


@flow(name="pretrain-model", retries=1, retry_delay_seconds=30, log_prints=True)
def pretrain_model(settings: PretrainForm) -> PretrainResult | State:
    """Pretrain the config's network as a masked autoencoder on its clips (labels ignored), on Ray (a
    local instance, or the cluster at RAY_ADDRESS / train.cluster.address), and register its encoder.
    A cancel stops it and ends the run Cancelled."""
    config = config_of(settings, pretraining=True)
    if isinstance(config, State):
        return config
    config = config.for_run(config.train.run_name or f"{config.name}-pretrain-{flow_run.id}")
    pretraining = run_pretraining(config, return_state=True)
    if pretraining.is_cancelled():
        return cancelled(pretraining)
    result = pretraining.result()
    log_outcome(
        config,
        result.training,
        f"encoder:     {result.encoder.summary()}",
        f"fine-tune from it: model.init_from={result.init_from}",
    )
    return result
