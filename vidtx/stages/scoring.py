"""Batch scoring: the served classifier over many videos, in this process or as a Ray Data job, and
the predictions table it writes.

On Ray, `map_batches` runs one model replica per actor (`predict.replicas`; by default one per GPU of
the cluster, else one per node), each with a GPU when the cluster has them. The classifier the driver
loaded travels to the actors with them, so the workers never look the model up (one version for the
whole job, and no registry access needed on the cluster). Both ways give the same rows: the video's
path and the classifier's output columns.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import ray
import ray.data

from vidtx import storage
from vidtx.config import PredictConfig
from vidtx.files import replaced
from vidtx.locations import Location, name_of
from vidtx.log import adopt_loggers
from vidtx.ray_session import ray_session
from vidtx.serving.classifier import INPUT_COLUMN, VideoClassifier

PATH_COLUMN = "path"
TABLE_SCHEMA = pa.schema(
    [
        (PATH_COLUMN, pa.string()),
        ("label", pa.string()),
        ("score", pa.float64()),
        ("top_k_labels", pa.list_(pa.string())),
        ("top_k_scores", pa.list_(pa.float64())),
        ("error", pa.string()),
    ]
)
TABLE_FORMATS = (".parquet", ".csv")


def scored(classifier: VideoClassifier, paths: Sequence[str], views: dict[str, int]) -> pd.DataFrame:
    """The classifier's rows for `paths`, with the path first."""
    frame = classifier.predict(None, pd.DataFrame({INPUT_COLUMN: list(paths)}), views)
    frame.insert(0, PATH_COLUMN, list(paths))
    return frame


def score_here(
    classifier: VideoClassifier, paths: Sequence[str], views: dict[str, int], batch_size: int
) -> Iterator[pd.DataFrame]:
    classifier.to_best_device()
    for start in range(0, len(paths), batch_size):
        yield scored(classifier, paths[start : start + batch_size], views)


class _Replica:
    """One model replica of the Ray Data job (an actor): the classifier, on the actor's GPU if any."""

    def __init__(self, classifier: VideoClassifier, views: dict[str, int]) -> None:
        self.classifier, self.views = classifier.to_best_device(), views

    def __call__(self, batch: pd.DataFrame) -> pd.DataFrame:
        return scored(self.classifier, batch[PATH_COLUMN].tolist(), self.views)


def score_on_ray(
    classifier: VideoClassifier, paths: Sequence[str], views: dict[str, int], predict: PredictConfig
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
            yield pd.DataFrame(batch.to_pylist(), columns=TABLE_SCHEMA.names, dtype=object)  # lists, None


@contextlib.contextmanager
def table_writer(where: Location | None) -> Iterator[Callable[[pd.DataFrame], None]]:
    """A function that appends rows to the predictions table at `where` (.parquet, or .csv with the
    lists as JSON); the table appears complete when the block ends, or not at all. None: no table."""
    if where is None:
        yield lambda frame: None
        return
    suffix = "." + name_of(where).rsplit(".", 1)[-1].lower()
    if suffix not in TABLE_FORMATS:
        raise ValueError(f"predict.output: {where}: the table is written as .parquet or .csv")
    with storage.staged(where) as local, replaced(local) as temporary:
        if suffix == ".parquet":
            with pq.ParquetWriter(temporary, TABLE_SCHEMA) as writer:
                yield lambda frame: writer.write_table(
                    pa.Table.from_pandas(frame, TABLE_SCHEMA, preserve_index=False)
                )
            return
        with temporary.open("w", newline="") as file:
            file.write(",".join(TABLE_SCHEMA.names) + "\n")

            def append(frame: pd.DataFrame) -> None:
                lists = {name: frame[name].map(json.dumps) for name in ("top_k_labels", "top_k_scores")}
                frame.assign(**lists).to_csv(file, header=False, index=False)

            yield append
