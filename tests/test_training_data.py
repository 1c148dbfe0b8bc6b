"""Training on several shard sets mixed by weight (`data.sources`): labels merged by class name, the
mix's proportions over epochs, class balance, and evaluation in the model's label set."""

import itertools
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from vidtx.config import DataConfig, ShardConfig
from vidtx.data.eval_loader import build_eval_loader
from vidtx.data.train_loader import build_train_loader
from vidtx.train.splits import training_splits

PUBLIC = ["moving_left", "moving_right", "growing"]  # 6 training videos each
OURS = ["shrinking", "moving_right"]  # another label order, one class of its own


@pytest.fixture(scope="module")
def two_sources(
    synthetic_shards: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path]:
    """The session's synthetic videos sharded twice, as two datasets with other label sets:
    (public: 3 classes, ours: 2 classes, one shared)."""
    from vidtx.stages.shard import shard_dataset

    videos, _ = synthetic_shards
    root = tmp_path_factory.mktemp("sources")
    for name, classes in {"public": PUBLIC, "ours": OURS}.items():
        shard_dataset(
            ShardConfig(
                source=videos / "annotations.csv",
                output=root / name,
                classes=classes,  # label ids in this order; the other videos are rejects
                max_reject_fraction=1.0,
                max_samples_per_shard=5,
                processes=1,
            )
        )
    return root / "public", root / "ours"


def mixed_config(public: Path, ours: Path, **changes: object) -> DataConfig:
    fields = {
        "shards": ours,
        "sources": [{"shards": public, "weight": 1.0}, {"shards": ours, "weight": 3.0}],
        "num_frames": 2,
        "short_side": 16,
        "crop_size": 16,
        "num_workers": 0,
        "shuffle_buffer": 8,
    }
    return DataConfig(**(fields | changes))


def class_counts(cfg: DataConfig, epochs: int) -> tuple[Counter[str], list[str]]:
    """Clips per class over `epochs` epochs of one rank's loader; each clip's label is checked against
    its video's class (its key: train/<class>/<n>) in the merged label set."""
    loader = build_train_loader(cfg, batch_size=6, seed=0)
    names = loader.data.class_names
    counts: Counter[str] = Counter()
    for _ in range(epochs):
        for _, labels, keys in loader:
            for label, key in zip(labels.tolist(), keys, strict=True):
                assert names[label] == key.split("/")[1], key
                counts[key.split("/")[1]] += 1
    return counts, names


def within_sampling_error(counts: Counter[str], expected: dict[str, float]) -> None:
    """Each class's share of the clips within 4 standard errors of `expected` (binomial)."""
    total = sum(counts.values())
    for name, share in expected.items():
        error = math.sqrt(share * (1 - share) / total)
        assert abs(counts[name] / total - share) < 4 * error, (name, counts[name] / total, share, counts)


@pytest.mark.usefixtures("single_process")
def test_sources_mix_by_weight_with_labels_merged_by_class_name(two_sources: tuple[Path, Path]) -> None:
    public, ours = two_sources
    cfg = mixed_config(public, ours)
    data, validation = training_splits(cfg)
    assert data.class_names == ["moving_left", "moving_right", "growing", "shrinking"]  # first appearance
    assert [source.labels for source in data.sources] == [(0, 1, 2), (3, 1)]
    assert data.num_samples == 18 + 12
    assert validation is not None
    assert validation.class_names == OURS  # validation reads data.shards
    counts, _ = class_counts(cfg, epochs=16)
    assert sum(counts.values()) == 16 * math.ceil(30 / 6) * 6  # an epoch: the sources' samples together
    # a quarter from public (a third of it each class), three quarters from ours (half each class)
    expected = {"moving_left": 1 / 12, "growing": 1 / 12, "moving_right": 1 / 12 + 3 / 8, "shrinking": 3 / 8}
    assert data.class_frequencies() == pytest.approx([expected[name] for name in data.class_names])
    within_sampling_error(counts, expected)  # equal weights would give shrinking 1/4: 5.6 errors away


@pytest.mark.usefixtures("single_process")
def test_class_balance_draws_every_class_equally_often(two_sources: tuple[Path, Path]) -> None:
    counts, names = class_counts(mixed_config(*two_sources, balance="classes"), epochs=16)
    within_sampling_error(counts, dict.fromkeys(names, 1 / len(names)))


@pytest.mark.usefixtures("single_process")
def test_the_stream_of_mixed_sources_is_the_same_each_time_an_epoch_is_read(
    two_sources: tuple[Path, Path],
) -> None:
    cfg = mixed_config(*two_sources, balance="classes")
    first = build_train_loader(cfg, batch_size=6, seed=0)
    epochs = [[keys for _, _, keys in first] for _ in range(2)]
    again = build_train_loader(cfg, batch_size=6, seed=0, epoch=1)
    assert [keys for _, _, keys in again] == epochs[1] != epochs[0]
    resumed = build_train_loader(cfg, batch_size=6, seed=0)
    taken = list(itertools.islice(iter(resumed), 2))
    state = resumed.state_dict()
    restored = build_train_loader(cfg, batch_size=6, seed=0)
    restored.load_state_dict(state)
    assert [keys for _, _, keys in taken] + [keys for _, _, keys in restored] == epochs[0]


def test_evaluation_labels_follow_the_model_s_label_set(two_sources: tuple[Path, Path]) -> None:
    public, ours = two_sources
    cfg = mixed_config(public, ours)
    model_classes = ["moving_left", "moving_right", "growing", "shrinking"]
    loader = build_eval_loader(cfg, "val", batch_size=4, rank=0, world_size=1, class_names=model_classes)
    for _, labels, keys in loader:
        assert [model_classes[label] for label in labels.tolist()] == [key.split("/")[1] for key in keys]
    with pytest.raises(ValueError, match="has classes the model does not know: shrinking"):
        build_eval_loader(cfg, "val", batch_size=4, rank=0, world_size=1, class_names=PUBLIC)
    with pytest.raises(ValueError, match="has classes the model does not know: shrinking"):
        training_splits(mixed_config(public, ours, sources=[{"shards": public}]))  # before any compute


def test_a_missing_source_is_named_before_anything_runs(
    two_sources: tuple[Path, Path], tmp_path: Path
) -> None:
    public, ours = two_sources
    cfg = mixed_config(public, ours, sources=[{"shards": public}, {"shards": tmp_path / "gone"}])
    with pytest.raises(FileNotFoundError, match=r"data.sources\[1\].shards .*gone: no such folder"):
        training_splits(cfg)
    assert np.isclose(
        sum(source.weight for source in training_splits(mixed_config(public, ours))[0].sources), 1
    )
