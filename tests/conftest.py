"""Shared test set-up: the same environment defaults as the CLI and flows."""

from vidtx.env import apply_defaults

apply_defaults()


# --- data: real MP4 files written with PyAV ------------------------------------------------------

from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402


def pattern_frames(num_frames: int, width: int, height: int) -> np.ndarray:
    """Frames that all differ (a diagonal ramp shifted by 9 levels per frame), uint8 (T, H, W, 3)."""
    y, x = np.mgrid[0:height, 0:width]
    t = np.arange(num_frames)[:, None, None]
    red = (3 * x + 9 * t) % 256
    green = np.broadcast_to((3 * y) % 256, red.shape)
    blue = np.broadcast_to((30 * t) % 256, red.shape)
    return np.stack([red, green, blue], axis=-1).astype(np.uint8)


@pytest.fixture
def write_mp4() -> Callable[..., Path]:
    """`write_mp4(path, num_frames=12, width=64, height=48, fps=12.0)`: a real H.264 MP4 file."""
    from vidtx.data.encode import encode_mp4

    def write(path: Path, num_frames: int = 12, width: int = 64, height: int = 48, fps: float = 12.0) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_mp4(pattern_frames(num_frames, width, height), fps))
        return path

    return write


@pytest.fixture(scope="session")
def synthetic_shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A small synthetic dataset (4 classes, 6 train and 3 val videos per class, 8 frames of 32x32)
    and its shards (5 samples per shard): (dataset folder, shard folder)."""
    from vidtx.config import ShardConfig, SynthConfig
    from vidtx.data.shard import shard_dataset
    from vidtx.data.synthetic import generate_dataset

    root = tmp_path_factory.mktemp("synthetic")
    synth = SynthConfig(
        output=root / "videos",
        classes=["moving_left", "moving_right", "growing", "shrinking"],
        videos_per_class={"train": 6, "val": 3},
        num_frames=8,
        size=32,
        fps=8,
    )
    annotations = generate_dataset(synth)
    shard_dataset(
        ShardConfig(source=annotations, output=root / "shards", max_samples_per_shard=5, processes=1)
    )
    return root / "videos", root / "shards"


# --- training: a pipeline config over the synthetic shards ---------------------------------------

from collections.abc import Iterator  # noqa: E402

from vidtx.config import PipelineConfig, load_config  # noqa: E402


@pytest.fixture(scope="session")
def ray_instance() -> Iterator[None]:
    """One local Ray for the whole session: `train()` and Ray evaluation use it instead of starting
    (and stopping) their own each time, which saves ~10 s per run."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_dataset(synthetic_shards: tuple[Path, Path], ray_instance: None) -> PipelineConfig:
    """The demo pipeline shrunk to the session's synthetic shards (xvit_tiny at 32x32, 4 frames)."""
    _, shards = synthetic_shards
    return load_config(
        None,
        [
            f"data.shards={shards}",
            "data.num_frames=4",
            "data.short_side=32",
            "data.crop_size=32",
            "data.num_workers=0",
            "model.name=xvit_tiny",
            "train.num_workers=2",
            "train.micro_batch_size=4",
            "train.optimizer={name: adamw, lr: 0.002, weight_decay: 0.01}",
            "train.log_every=1",
            "eval.split=val",
            "eval.batch_size=4",
        ],
    )


@pytest.fixture(scope="session")
def trained_run(tiny_dataset: PipelineConfig, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """A tiny X-ViT trained for 60 steps by 2 Ray workers (ZeRO-1, fp32): (config, TrainResult)."""
    from vidtx.train.launcher import train

    workdir = tmp_path_factory.mktemp("trained")
    config = tiny_dataset.model_copy(deep=True)
    config.workdir = workdir
    config.train = config.train.model_copy(
        update={
            "storage_path": str(workdir / "ray"),
            "max_steps": 60,
            "checkpoint_every": 60,
            "log_every": 10,
        }
    )
    config.train.optimizer.lr = 0.003
    config.train.precision = "fp32"
    return config, train(config, run_name="trained")
