"""Where a trained model came from, as its MLflow training run records it (for lineage tables).

Training tags its run when it starts or resumes: the content hash of the training split's manifest,
the git commit of the checkout, and (run from Prefect) the flow run that trained it. A resumed run
gets the tags of its latest start, which is what trained its final weights.
"""

from __future__ import annotations

import dataclasses

from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT

from vidtx.config import PipelineConfig
from vidtx.tracking.links import experiment_link, run_link
from vidtx.tracking.runs import connect, resolve_tracking_uri

MANIFEST_HASH_TAG = "vidtx.manifest_hash"  # the training data's content hash (`TrainingData.content_hash`)
FLOW_RUN_TAG = "prefect.flow_run_id"  # the Prefect flow run that trained the run (set by flows/train.py)
INIT_FROM_TAG = "vidtx.init_from"  # the weights the training started from (`model.init_from`)
OBJECTIVE_TAG = "vidtx.objective"  # what the run learned: classification, masked_autoencoding


@dataclasses.dataclass(frozen=True)
class RunLineage:
    """The lineage tags of one MLflow training run; None where the run has no such tag."""

    mlflow_run_id: str
    mlflow_run_url: str
    mlflow_experiment_url: str
    manifest_hash: str | None
    git_commit: str | None
    flow_run_id: str | None
    init_from: str | None  # the weights it started from


def run_lineage(config: PipelineConfig, run_id: str) -> RunLineage:
    """Read the lineage tags of MLflow run `run_id` from the config's tracking store."""
    run = connect(resolve_tracking_uri(config)).get_run(run_id)
    tags = run.data.tags
    return RunLineage(
        mlflow_run_id=run_id,
        mlflow_run_url=run_link(config, run.info.experiment_id, run_id),
        mlflow_experiment_url=experiment_link(config, run.info.experiment_id),
        manifest_hash=tags.get(MANIFEST_HASH_TAG),
        git_commit=tags.get(MLFLOW_GIT_COMMIT),
        flow_run_id=tags.get(FLOW_RUN_TAG),
        init_from=tags.get(INIT_FROM_TAG),
    )
