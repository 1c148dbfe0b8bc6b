"""Batch scoring: the served classifier over many videos in this process (as a Ray Data job:
`vidtx.stages.ray_scoring`, which gives the same rows), and the predictions table both write."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from vidtx import storage
from vidtx.files import replaced
from vidtx.locations import Location
from vidtx.serving.classifier import OUTPUT_COLUMNS, VideoClassifier
from vidtx.serving.video_model import INPUT_COLUMN, output_frame
from vidtx.storage import name_of

PATH_COLUMN = "path"
TABLE_COLUMNS = [
    (PATH_COLUMN, pa.string()),
    ("label", pa.string()),
    ("score", pa.float64()),
    ("top_k_labels", pa.list_(pa.string())),
    ("top_k_scores", pa.list_(pa.float64())),
    ("error", pa.string()),
]
TABLE_FORMATS = (".parquet", ".csv")
LABEL_SET_COLUMNS = [("labels", pa.list_(pa.string())), ("label_scores", pa.list_(pa.float64()))]
LIST_COLUMNS = ("top_k_labels", "top_k_scores", "labels", "label_scores", "embedding")  # JSON in a CSV table


WINDOW_COLUMNS = [
    ("window", pa.int64()),  # null: the whole video's row
    ("start", pa.float64()),
    ("end", pa.float64()),
    ("note", pa.string()),
]


def table_schema(
    embedding_dim: int | None = None, windows: bool = False, multi_label: bool = False
) -> pa.Schema:
    """The predictions table's columns (with `windows`, where each row's window is; with
    `multi_label`, the classes at or above the threshold and their scores); with `embedding_dim`, an
    `embedding` column: a list of that many float32 per readable video (its field's metadata says how
    many), null for the others. (Not Arrow's fixed-size list: pyarrow 25 writes its null rows to
    Parquet but cannot read them back.)"""
    columns = [TABLE_COLUMNS[0], *(WINDOW_COLUMNS if windows else []), *TABLE_COLUMNS[1:-1]]
    columns += [*(LABEL_SET_COLUMNS if multi_label else []), TABLE_COLUMNS[-1]]
    if embedding_dim:
        columns.append(pa.field("embedding", pa.list_(pa.float32()), metadata={"dim": str(embedding_dim)}))
    return pa.schema(columns)


def scored(classifier: VideoClassifier, paths: Sequence[str], settings: dict[str, Any]) -> pd.DataFrame:
    """The classifier's rows for `paths`, with the path first: one per video, or with a `window` in
    `settings`, one per window and the video's (`VideoClassifier.classify_windows`)."""
    if not settings.get("window"):
        frame = classifier.predict(None, pd.DataFrame({INPUT_COLUMN: list(paths)}), settings)
        frame.insert(0, PATH_COLUMN, list(paths))
        return frame
    rows = [(path, row) for path in paths for row in classifier.classify_windows(path, **settings)]
    frame = output_frame([row for _, row in rows], (*(name for name, _ in WINDOW_COLUMNS), *OUTPUT_COLUMNS))
    frame.insert(0, PATH_COLUMN, [path for path, _ in rows])
    return frame


def score_here(
    classifier: VideoClassifier, paths: Sequence[str], settings: dict[str, Any], batch_size: int
) -> Iterator[pd.DataFrame]:
    classifier.to_best_device()
    for start in range(0, len(paths), batch_size):
        yield scored(classifier, paths[start : start + batch_size], settings)


@contextlib.contextmanager
def table_writer(where: Location | None, schema: pa.Schema) -> Iterator[Callable[[pd.DataFrame], None]]:
    """A function that appends rows (the columns of `schema`) to the predictions table at `where`
    (.parquet, or .csv with the lists as JSON); the table appears complete when the block ends, or not
    at all. None: no table."""
    if where is None:
        yield lambda frame: None
        return
    suffix = "." + name_of(where).rsplit(".", 1)[-1].lower()
    if suffix not in TABLE_FORMATS:
        raise ValueError(f"predict.output: {where}: the table is written as .parquet or .csv")
    with storage.staged(where) as local, replaced(local) as temporary:
        if suffix == ".parquet":
            with pq.ParquetWriter(temporary, schema) as writer:
                yield lambda frame: writer.write_table(
                    pa.Table.from_pandas(frame[schema.names], schema, preserve_index=False)
                )
            return
        with temporary.open("w", newline="") as file:
            file.write(",".join(schema.names) + "\n")

            def append(frame: pd.DataFrame) -> None:
                lists = {name: frame[name].map(json.dumps) for name in LIST_COLUMNS if name in schema.names}
                frame[schema.names].assign(**lists).to_csv(file, header=False, index=False)

            yield append
