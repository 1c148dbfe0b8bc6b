"""Batch scoring as a Ray Data job: `map_batches` runs one model replica per actor (`predict.replicas`;
by default one per GPU of the cluster, else one per node), each with a GPU when the cluster has them.
The classifier the driver loaded travels to the actors with them, so the workers never look the model
up (one version for the whole job, and no registry access needed on the cluster). The rows are those
of `vidtx.stages.scoring.scored`: the video's path and the classifier's output columns.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pandas as pd
import ray
import ray.data

from vidtx.config import PredictConfig
from vidtx.log import adopt_loggers
from vidtx.ray_session import ray_session
from vidtx.serving.classifier import VideoClassifier
from vidtx.stages.scoring import PATH_COLUMN, scored


class _Replica:
    """One model replica of the Ray Data job (an actor): the classifier, on the actor's GPU if any."""

    def __init__(self, classifier: VideoClassifier, views: dict[str, Any]) -> None:
        self.classifier, self.views = classifier.to_best_device(), views

    def __call__(self, batch: pd.DataFrame) -> pd.DataFrame:
        return scored(self.classifier, batch[PATH_COLUMN].tolist(), self.views)


def score_on_ray(
    classifier: VideoClassifier, paths: Sequence[str], views: dict[str, Any], predict: PredictConfig
) -> Iterator[pd.DataFrame]:
    """The rows as the replicas finish their batches (not in input order)."""
    with ray_session(predict.ray_address):
        gpus = int(ray.cluster_resources().get("GPU", 0))
        replicas = predict.replicas or gpus or sum(1 for node in ray.nodes() if node["Alive"])
        adopt_loggers(["ray.data"])  # configured by Ray Data's import: its records go where vidtx's go
        dataset = ray.data.from_items([{PATH_COLUMN: path} for path in paths]).map_batches(
            _Replica,
            fn_constructor_kwargs={"classifier": classifier, "views": views},
            batch_size=predict.batch_size,
            batch_format="pandas",
            compute=ray.data.ActorPoolStrategy(size=replicas),
            num_gpus=1 if gpus else 0,
        )
        for batch in dataset.iter_batches(batch_size=None, batch_format="pyarrow"):
            yield pd.DataFrame(batch.to_pylist(), columns=batch.column_names, dtype=object)  # lists, None
