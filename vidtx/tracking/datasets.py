"""A run's data as MLflow dataset inputs: each split it reads, named by its shards and split, with the
manifest's content hash as digest and the manifest's location as source (the runs table's Dataset
column and the run page's inputs show them; the same data has the same digest in every run)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from mlflow import MlflowClient
from mlflow.data.dataset_source_registry import resolve_dataset_source
from mlflow.data.meta_dataset import MetaDataset
from mlflow.entities import DatasetInput, InputTag
from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

from vidtx.locations import Location
from vidtx.manifest import Manifest, manifest_path
from vidtx.storage import name_of

DIGEST_CHARS = 16  # of the manifest's sha256 (MLflow shows digests short; 64 bits tell datasets apart)


def split_dataset(shards: Location, split: str, manifest: Manifest) -> MetaDataset:
    """The split as an MLflow dataset: `<shards folder>/<split>`, digest, source the manifest file."""
    with warnings.catch_warnings():  # MLflow registers its local source for "" and "file://" alike
        warnings.filterwarnings("ignore", "The specified dataset source can be interpreted in multiple ways")
        source = resolve_dataset_source(str(manifest_path(shards, split)))
    return MetaDataset(source, name=f"{name_of(shards)}/{split}", digest=manifest.content_hash[:DIGEST_CHARS])


def log_dataset_inputs(
    client: MlflowClient, run_id: str, splits: Sequence[tuple[str, Location, Manifest]]
) -> None:
    """Record `splits` ((context, shards, manifest): training, once per source, and validation) as the
    run's dataset inputs; logging the same again (a resumed run) adds nothing."""
    inputs = [
        DatasetInput(
            split_dataset(shards, manifest.split, manifest)._to_mlflow_entity(),
            tags=[InputTag(MLFLOW_DATASET_CONTEXT, context)],
        )
        for context, shards, manifest in splits
    ]
    client.log_inputs(run_id, datasets=inputs)
