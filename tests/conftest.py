"""Shared test set-up: the same environment defaults as the CLI and flows."""

import os
import secrets

from infra.local.ports import free_port
from vidtx.env import apply_defaults

apply_defaults()

# The tests' S3 server (`s3_endpoint`): its address and credentials are in the environment from the
# start, so every process of the session (Ray's workers too) reads them as boto3 would. The secret is
# random and distinctive: tests check that it never reaches a log, MLflow or a manifest.
S3_SECRET = f"vidtx-test-secret-{secrets.token_hex(8)}"
os.environ |= {
    "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
    "AWS_ACCESS_KEY_ID": "vidtx-test-key",
    "AWS_SECRET_ACCESS_KEY": S3_SECRET,
    "AWS_DEFAULT_REGION": "us-east-1",
}
# Ray Train's controller polls its workers every 0.5 s on a local Ray (vidtx.env; Ray's default: 2 s), and
# `fit()` returns after the poll that sees the workers done. At 0.2 s: about 60 s less of the suite, whose
# trainings last seconds and number about 50.
os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.2")


# --- data: real MP4 files written with PyAV ------------------------------------------------------

from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from media import pattern_frames  # noqa: E402

from vidtx.config import ShardConfig  # noqa: E402


@pytest.fixture
def write_mp4() -> Callable[..., Path]:
    """`write_mp4(path, num_frames=12, width=64, height=48, fps=12.0)`: a real H.264 MP4 file."""
    from vidtx.media.encode import encode_mp4

    def write(path: Path, num_frames: int = 12, width: int = 64, height: int = 48, fps: float = 12.0) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_mp4(pattern_frames(num_frames, width, height), fps))
        return path

    return write


@pytest.fixture
def single_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """A loader built in the test process is rank 0 of 1, whatever a Ray worker's environment says."""
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)


@pytest.fixture(scope="session")
def synthetic_shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A small synthetic dataset (4 classes, 6 train and 3 val videos per class, 8 frames of 32x32)
    and its shards (5 samples per shard): (dataset folder, shard folder)."""
    from vidtx.config import SynthConfig
    from vidtx.shard.synthetic import generate_dataset
    from vidtx.stages.shard import shard_dataset

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


@pytest.fixture(scope="session")
def unlabeled_shards(synthetic_shards: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's synthetic videos sharded without labels (`shard.format: unlabeled`): train, val."""
    from vidtx.stages.shard import shard_dataset

    videos, _ = synthetic_shards
    output = tmp_path_factory.mktemp("unlabeled")
    shard_dataset(ShardConfig(source=videos, format="unlabeled", output=output, processes=1))
    return output


def frames_shard_config(synthetic_shards: tuple[Path, Path], output: str | Path) -> ShardConfig:
    """The session's synthetic videos as frames-store shards (5 samples per shard) at `output`."""
    videos, _ = synthetic_shards
    return ShardConfig(
        source=videos / "annotations.csv",
        output=output,
        store="frames",
        short_side=32,
        max_samples_per_shard=5,
        processes=1,
    )


@pytest.fixture(scope="session")
def frames_shards(synthetic_shards: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's synthetic dataset (32x32 videos) sharded as frames (5 samples per shard)."""
    from vidtx.stages.shard import shard_dataset

    output = tmp_path_factory.mktemp("frames") / "shards"
    shard_dataset(frames_shard_config(synthetic_shards, output))
    return output


# --- bad inputs: the `vidtx` command, and a dataset of bad and odd videos sharded with it ---------

import os  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from collections.abc import Sequence  # noqa: E402

from media import write_dataset  # noqa: E402


@pytest.fixture(scope="session", name="vidtx")
def vidtx_command() -> Callable[..., subprocess.CompletedProcess[str]]:
    """`vidtx(*args, prefix=())`: `python -m vidtx *args` run to completion (5 min at most), output
    captured; `prefix` is a command that runs it (`file_permissions_apply`, a mount namespace)."""

    def vidtx(*args: str, prefix: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
        command = [*prefix, sys.executable, "-m", "vidtx", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)

    return vidtx


@pytest.fixture
def file_permissions_apply() -> list[str]:
    """A command prefix under which file permissions stop the process: as root (the tests' usual user,
    whom mode 000 does not stop) setpriv without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH; skips the
    test where that cannot be done."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root, and without setpriv file permissions cannot be made to apply")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]


@pytest.fixture(scope="session")
def bad_dataset(
    tmp_path_factory: pytest.TempPathFactory, vidtx: Callable[..., subprocess.CompletedProcess[str]]
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """media.write_dataset (every bad and odd video case) sharded with `vidtx shard` (min_frames 3, any
    reject fraction allowed): (shard folder, the finished command)."""
    root = tmp_path_factory.mktemp("bad_inputs")
    annotations = write_dataset(root / "videos")
    options = [
        "--set",
        "shard.processes=1",
        "--set",
        "shard.min_frames=3",
        "--set",
        "shard.max_reject_fraction=1",
    ]
    return root / "shards", vidtx("shard", str(annotations), str(root / "shards"), *options)


# --- training: a pipeline config over the synthetic shards ---------------------------------------

from collections.abc import Iterator  # noqa: E402

from vidtx.config import PipelineConfig, load_config  # noqa: E402


@pytest.fixture(scope="session")
def ray_instance() -> Iterator[None]:
    """One local Ray for the whole session: `train()` and Ray evaluation use it instead of starting
    (and stopping) their own each time, which saves ~10 s per run. Started as vidtx starts one: on
    127.0.0.1 only."""
    from vidtx.ray_session import ray_session

    with ray_session(num_cpus=2, include_dashboard=False):
        yield


@pytest.fixture(scope="session")
def tiny_dataset(tiny_config: PipelineConfig, ray_instance: None) -> PipelineConfig:
    """`tiny_config` with the session's local Ray started (training and Ray evaluation use it)."""
    return tiny_config


@pytest.fixture(scope="session")
def tiny_config(synthetic_shards: tuple[Path, Path]) -> PipelineConfig:
    """The demo pipeline shrunk to the session's synthetic shards (xvit_tiny at 32x32, 4 frames); no
    local Ray (for runs submitted to a cluster)."""
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
            # The positions these tests' short runs (60-150 steps) were sized with: at 32 px the tiny
            # preset's 0.1 kept the loss at ln 4 for 150 steps (clean-clone CI), 1.0 lets it fall.
            "model.options={pos_embed_std: 1.0}",
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
    """A tiny X-ViT trained for 150 steps by 2 Ray workers (ZeRO-2, fp32: on this CPU, which has no
    native bf16, the fixture took 40 s against 64 s in bf16; every step logged):
    (config, TrainResult). One run for the session: `test_train.py` checks that its loss went down,
    evaluation, registry and frames-store tests use its checkpoint."""
    from training_runs import with_empty_tracking_store

    from vidtx.stages.train import train

    workdir = tmp_path_factory.mktemp("trained")
    with_empty_tracking_store(workdir)
    config = tiny_dataset.model_copy(deep=True)
    config.workdir = workdir
    config.train = config.train.model_copy(
        update={
            "storage_path": str(workdir / "ray"),
            "zero_stage": 2,
            "precision": "fp32",
            "max_steps": 150,  # at 100 steps of 4 clips, a 1-level change of input pixels moved the end by 0.3
            "checkpoint_every": 150,
            "log_every": 1,
        }
    )
    config.train.optimizer.lr = 0.003
    return config, train(config, run_name="loss-down")


# --- orchestration: one temporary Prefect server for the session's flow tests --------------------


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[None]:
    """A temporary Prefect API (`prefect_test_harness`) shared by tests/test_flows.py and
    tests/test_cluster.py instead of one server each (~15 s per start)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield


# --- object storage: one real S3 server (SeaweedFS on 127.0.0.1) for the session ------------------

from infra.local.s3_server import SeaweedFS  # noqa: E402


@pytest.fixture(scope="session")
def s3_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The log of every request made to the session's S3 server (`latency_proxy.requests` reads it)."""
    return tmp_path_factory.mktemp("s3") / "requests.log"


@pytest.fixture(scope="session")
def s3_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    """The session's SeaweedFS (store and S3 gateway), taking only the environment's keys; its
    gateway is reached through the recorder at AWS_ENDPOINT_URL (`s3_endpoint`)."""
    from infra.local.s3_server import s3_server

    users = {os.environ["AWS_ACCESS_KEY_ID"]: S3_SECRET}
    with s3_server(tmp_path_factory.mktemp("seaweedfs"), free_port(), users) as server:
        yield server


@pytest.fixture(scope="session")
def s3_endpoint(s3_store: SeaweedFS, s3_log: Path) -> Iterator[str]:
    """The session's S3 endpoint, AWS_ENDPOINT_URL: a recorder (the latency proxy at no delay,
    logging each request line to `s3_log`) in front of the SeaweedFS gateway."""
    from infra.local.latency_proxy import latency_proxy

    port = int(os.environ["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])
    with latency_proxy(port, s3_store.s3_port, 0, log=s3_log) as endpoint:
        yield endpoint


@pytest.fixture
def bucket(s3_endpoint: str, request: pytest.FixtureRequest) -> str:
    """A new, empty bucket for the test: `s3://<name>`."""
    import re

    from infra.local.s3_server import create_bucket

    name = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:50] + f"-{secrets.token_hex(3)}"
    return create_bucket(s3_endpoint, name)


@pytest.fixture(scope="session")
def bucket_shards(synthetic_shards: tuple[Path, Path], s3_endpoint: str) -> str:
    """The session's synthetic videos sharded into a bucket as `synthetic_shards` are on disk (video
    store, 5 samples per shard): `s3://session-shards/shards`."""
    from infra.local.s3_server import create_bucket
    from vidtx.stages.shard import shard_dataset

    videos, _ = synthetic_shards
    url = create_bucket(s3_endpoint, "session-shards") + "/shards"
    shard_dataset(
        ShardConfig(source=videos / "annotations.csv", output=url, max_samples_per_shard=5, processes=1)
    )
    return url


@pytest.fixture(scope="session")
def bucket_frames_shards(synthetic_shards: tuple[Path, Path], s3_endpoint: str) -> str:
    """`frames_shards` in a bucket: `s3://session-frames/shards`."""
    from infra.local.s3_server import create_bucket
    from vidtx.stages.shard import shard_dataset

    url = create_bucket(s3_endpoint, "session-frames") + "/shards"
    shard_dataset(frames_shard_config(synthetic_shards, url))
    return url


# --- a registered model ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def registered_model(tiny_config: PipelineConfig, tmp_path_factory: pytest.TempPathFactory) -> str:
    """An untrained xvit_tiny (4 frames at 32x32, views 1x1) registered as `models:/predict-test@champion`
    in a registry of its own: its tracking URI."""
    from vidtx.eval.multiview import evaluate
    from vidtx.manifest import load_manifest
    from vidtx.model_factory import model_for
    from vidtx.tracking.model_registry import register
    from vidtx.tracking.runs import connect, start_or_resume_run

    workdir = tmp_path_factory.mktemp("registry")
    config = tiny_config.model_copy(deep=True)
    config.workdir, config.eval.num_crops, config.registry.model_name = workdir, 1, "predict-test"
    config.registry.min_top1 = 0.0  # untrained: no alias otherwise
    model = model_for(config)
    result = evaluate(model, load_manifest(config.data.shards, "val"), config.data, config.eval)
    client = connect(f"sqlite:///{workdir}/mlflow.db")
    register(model, config, result, client=client, run_id=start_or_resume_run(client, config, "predict"))
    return client.tracking_uri


# --- the suite's time: the slowest tests, every phase counted ------------------------------------

SLOWEST_SHOWN = 15
_seconds_per_test: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _seconds_per_test[report.nodeid] = _seconds_per_test.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The slowest tests with their setup and teardown (a module's fixture counts where it is paid):
    `.ci/run` prints them again beside the wall time, so that creep shows in every CI log."""
    slowest = sorted(_seconds_per_test.items(), key=lambda item: item[1], reverse=True)[:SLOWEST_SHOWN]
    terminalreporter.write_sep("=", f"the {len(slowest)} slowest tests (setup + call + teardown)")
    for nodeid, seconds in slowest:
        terminalreporter.write_line(f"{seconds:8.1f} s  {nodeid}")


# --- DeepSpeed engines in the test's own process (tests/engines.py) ------------------------------


@pytest.fixture(scope="module")
def single_process_group() -> Iterator[None]:
    """DeepSpeed outside Ray needs the torch.distributed rendezvous variables (else it tries MPI)."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {
            "RANK": "0",
            "WORLD_SIZE": "1",
            "LOCAL_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(free_port()),
            "DS_ACCELERATOR": "cpu",
        }.items():
            patch.setenv(name, value)
        yield
