"""Shards and checkpoints in a bucket: one notion of a location (`vidtx.locations`), one client
(`vidtx.storage`), against a real S3 server (SeaweedFS on 127.0.0.1, `s3_endpoint`)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch

from infra.local.latency_proxy import latency_proxy, requests
from infra.local.ports import free_port
from infra.local.s3_server import SeaweedFS
from vidtx import storage
from vidtx.cache import ShardCache, is_cached_tar
from vidtx.config import DataConfig, ShardConfig
from vidtx.data.eval_loader import build_eval_loader
from vidtx.data.train_loader import build_train_loader
from vidtx.locations import location
from vidtx.manifest import damaged_shards, find_splits, load_manifest
from vidtx.shard.writer import write_shard
from vidtx.stages.shard import plan_dataset
from vidtx.storage import join, name_of, parent_of

WRITE_HALF_THEN_WAIT = """
import sys, time
from vidtx import storage
filesystem, path = storage.run_storage(sys.argv[1])
with filesystem.open_output_stream(path) as out:
    out.write(b'{"half": ')
    out.flush()
    print("written", flush=True)
    time.sleep(60)
"""


def test_a_file_ray_train_writes_on_disk_appears_whole_or_not_at_all(tmp_path: Path) -> None:
    """Ray Train's run snapshot and checkpoint files go through `storage.run_storage` on disk: a
    writer killed mid-file leaves the earlier file as it was (pyarrow's LocalFileSystem had truncated
    it: a run killed there could not resume), a closed stream puts the new one in its place."""
    import pickle

    import pyarrow.fs

    snapshot = tmp_path / "run" / "checkpoint_manager_snapshot.json"
    filesystem, path = storage.run_storage(snapshot.parent)
    assert path == str(snapshot.parent)
    filesystem = pickle.loads(pickle.dumps(filesystem))  # as Ray sends it
    with filesystem.open_output_stream(str(snapshot)) as out:
        out.write(b'{"checkpoints": 1}')
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITE_HALF_THEN_WAIT, str(snapshot)], stdout=subprocess.PIPE
    )
    assert writer.stdout is not None
    assert writer.stdout.readline() == b"written\n"
    writer.kill()
    writer.wait(timeout=30)
    assert snapshot.read_bytes() == b'{"checkpoints": 1}'
    with filesystem.open_input_stream(str(snapshot)) as read:
        assert read.read() == b'{"checkpoints": 1}'
    names = sorted(
        info.base_name for info in filesystem.get_file_info(pyarrow.fs.FileSelector(str(snapshot.parent)))
    )
    assert names == [snapshot.name, f"{snapshot.name}.tmp"]  # the killed write, beside it
    with filesystem.open_output_stream(str(snapshot)) as out:
        out.write(b'{"checkpoints": 2}')
    assert snapshot.read_bytes() == b'{"checkpoints": 2}'


def test_ray_keeps_a_run_in_a_bucket_through_vidtxs_client_and_no_credential_travels(bucket: str) -> None:
    """`storage.run_storage` of a bucket: pickled as Ray sends it (the endpoint and region, never a
    key), it is rebuilt as vidtx's client with its retries, and writes and reads the bucket."""
    import pickle

    filesystem, path = storage.run_storage(f"{bucket}/runs")
    assert path == f"{bucket.removeprefix('s3://')}/runs"
    sent = pickle.dumps(filesystem)
    assert os.environ["AWS_SECRET_ACCESS_KEY"].encode() not in sent
    assert os.environ["AWS_ACCESS_KEY_ID"].encode() not in sent
    received = pickle.loads(sent)
    with received.open_output_stream(f"{path}/snapshot.json") as out:
        out.write(b"{}")
    assert storage.read_bytes(f"{bucket}/runs/snapshot.json") == b"{}"
    assert received.get_file_info(f"{path}/snapshot.json").size == 2


def test_a_location_is_a_path_here_or_a_url_in_a_bucket() -> None:
    assert location("data/shards") == Path("data/shards")
    assert location("file:///mnt/shards/") == Path("/mnt/shards")
    assert location("s3://bucket/prefix/") == "s3://bucket/prefix"
    assert location("gs://bucket") == "gs://bucket"
    assert join("s3://bucket/prefix", "train-000000.tar") == "s3://bucket/prefix/train-000000.tar"
    assert join(Path("/data"), "x.tar") == Path("/data/x.tar")
    assert name_of("s3://bucket/prefix/x.tar") == "x.tar"
    assert parent_of("s3://bucket/prefix/x.tar") == "s3://bucket/prefix"
    for bad, reason in [
        ("http://host/x", "unsupported storage scheme 'http'"),
        ("s3:///x", "no bucket name"),
    ]:
        with pytest.raises(ValueError, match=reason):
            location(bad)


def test_shards_written_to_a_bucket_are_the_disks_bytes_and_a_rerun_reuses_them(
    synthetic_shards: tuple[Path, Path], bucket_shards: str
) -> None:
    """Each tar is uploaded as one object, its marker after it, the manifests last; the same input
    gives the same tars as on disk (the same content hash); a re-run finds every shard complete."""
    videos, local = synthetic_shards
    local_files = sorted(p.name for p in local.iterdir() if p.is_file())
    assert storage.names(bucket_shards) == local_files
    assert find_splits(bucket_shards) == ["train", "val"]
    for split in ("train", "val"):
        remote, disk = load_manifest(bucket_shards, split), load_manifest(local, split)
        assert remote.content_hash == disk.content_hash
        assert damaged_shards(remote) == []  # sizes and sha256 of the objects, read back
    config = ShardConfig(source=videos / "annotations.csv", output=bucket_shards, max_samples_per_shard=5)
    assert all(write_shard(spec, config).reused for spec in plan_dataset(config))
    assert [p for p in (Path(tempfile.gettempdir()) / "vidtx-scratch").rglob("*") if p.is_file()] == []


@pytest.mark.parametrize("store", ["video", "frames"])
def test_the_loaders_read_a_bucket_as_they_read_a_disk(
    synthetic_shards: tuple[Path, Path],
    frames_shards: Path,
    bucket_shards: str,
    bucket_frames_shards: str,
    s3_log: Path,
    store: str,
) -> None:
    """The same views from a bucket as from disk; a frames-store clip costs one ranged request (its
    tar's `MemberIndex` gives the frames' bytes), a video-store tar one streamed request."""
    _, local = synthetic_shards
    remote = bucket_shards
    if store == "frames":
        local, remote = frames_shards, bucket_frames_shards
    data = DataConfig(shards=local, num_frames=4, short_side=32, crop_size=32, num_workers=0)
    batches = [
        list(build_eval_loader(config, "val", batch_size=4, num_clips=2))
        for config in (data, data.model_copy(update={"shards": location(remote)}))
    ]
    assert len(batches[0]) == len(batches[1]) == 3  # 12 videos
    for (views, labels, keys), (bucket_views, bucket_labels, bucket_keys) in zip(*batches, strict=True):
        assert keys == bucket_keys
        assert torch.equal(labels, bucket_labels)
        assert torch.equal(views, bucket_views)
    mark = s3_log.stat().st_size
    list(build_eval_loader(data.model_copy(update={"shards": location(remote)}), "val", batch_size=4))
    made = [request for request in requests(s3_log, mark) if ".tar" in request]
    tars = {request.split()[1] for request in made}
    if store == "frames":  # one ranged GET per clip (12); a HEAD when a process first opens a tar
        assert sum(m.startswith("GET") for m in made) == 12
        assert sum(m.startswith("HEAD") for m in made) <= len(tars)
    else:  # one streamed GET per tar (of at most 8 MiB)
        assert sum(m.startswith("GET") for m in made) == len(tars)


DEMO = Path(__file__).parents[1] / "configs/experiments/demo.yaml"


def run_vidtx(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "vidtx", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=os.environ | env)


def test_a_bucket_that_cannot_be_used_is_one_line_naming_it(
    synthetic_shards: tuple[Path, Path], s3_endpoint: str, tmp_path: Path
) -> None:
    """A missing bucket or an endpoint that does not answer: one line, exit 1, before any work."""
    videos, _ = synthetic_shards
    annotations = str(videos / "annotations.csv")
    closed = f"http://127.0.0.1:{free_port()}"
    cases = [
        (["shard", annotations, "s3://no-such-bucket/shards"], {}, "s3://no-such-bucket/shards: no bucket"),
        (
            ["shard", "s3://no-such-bucket/videos/annotations.csv", str(tmp_path / "shards")],
            {},
            "s3://no-such-bucket/videos/annotations.csv: no bucket",
        ),
        (
            ["shard", annotations, "s3://any/shards"],
            {"AWS_ENDPOINT_URL": closed},
            f"cannot reach the storage endpoint {closed}",
        ),
        (
            ["train", str(DEMO), "--set=data.shards=s3://no-such-bucket/shards", f"--set=workdir={tmp_path}"],
            {},
            "s3://no-such-bucket/shards: no bucket",
        ),
    ]
    for args, env, message in cases:
        started = time.monotonic()
        result = run_vidtx(*args, **env)
        elapsed = time.monotonic() - started
        assert elapsed < 15, (args, elapsed)  # told at the start, not after a minute of retries
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 1, result.stderr
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("error: ")
        assert message in lines[0]
        assert os.environ["AWS_SECRET_ACCESS_KEY"] not in result.stdout + result.stderr


def test_a_server_that_pauses_mid_epoch_only_delays_the_loader(
    bucket_shards: str, s3_store: SeaweedFS
) -> None:
    """The S3 gateway stopped (SIGSTOP) for 3 s while the training loader reads: the requests wait,
    the epoch ends with every batch, none skipped."""
    data = DataConfig(
        shards=location(bucket_shards), num_frames=4, short_side=32, crop_size=32, num_workers=0
    )
    server = psutil.Process(s3_store.processes["gateway"].pid)
    loader = build_train_loader(data, batch_size=2, seed=0)
    batches = iter(loader)
    labels = [next(batches)[1]]
    server.suspend()
    threading.Timer(3.0, server.resume).start()
    started = time.monotonic()
    labels += [batch[1] for batch in batches]
    assert time.monotonic() - started >= 2.5  # it waited for the server
    assert len(labels) == len(loader) == 12  # 24 training videos on one rank, 2 per batch: every batch


def test_inspect_checks_the_shards_of_a_bucket_and_writes_its_contact_sheets_there(
    bucket_shards: str,
) -> None:
    sheets = f"{parent_of(bucket_shards)}/sheets"
    result = run_vidtx("inspect", bucket_shards, "--videos", "2", "--frames", "2", "--output", sheets)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("shards intact") == 2  # train and val: sizes and sha256 read back
    assert storage.names(sheets) == ["train.contact.png", "val.contact.png"]
    assert storage.read_bytes(join(sheets, "val.contact.png")).startswith(b"\x89PNG")


@pytest.mark.slow
def test_a_shard_job_killed_mid_upload_leaves_only_whole_shards_and_the_rerun_finishes(
    synthetic_shards: tuple[Path, Path], bucket: str, tmp_path: Path
) -> None:
    """SIGKILL once the first marker is in the bucket: no manifest, every tar there is whole (an
    object appears only once uploaded), and a re-run completes the splits with the disk's tars. The
    killed job reaches the bucket through the latency proxy, which answers no request after the first
    marker's upload: the job is stopped there whatever the machine's load (a kill on seeing the
    marker raced the job, and on a busy machine lost: every shard was written before the test saw
    the first)."""
    videos, local = synthetic_shards
    target = f"{bucket}/shards"
    command = [sys.executable, "-m", "vidtx", "shard", str(videos / "annotations.csv"), target]
    command += ["--set=shard.max_samples_per_shard=5", "--set=shard.processes=1"]
    (tmp_path / "tmp").mkdir()
    environment = os.environ | {"TMPDIR": str(tmp_path / "tmp")}  # where its staging folder is left
    server_port = int(os.environ["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])
    # the request that completes a marker's (multipart) upload: POST <name>.stats.json?uploadId=...
    with latency_proxy(free_port(), server_port, 10, stall_after=".stats.json?uploadId=") as stalling_bucket:
        job = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=environment | {"AWS_ENDPOINT_URL": stalling_bucket},
        )
        deadline = time.monotonic() + 120
        while not storage.names(target, ".stats.json") and time.monotonic() < deadline:
            time.sleep(0.05)
        job.kill()
        job.wait()
    written = storage.names(target)
    markers = [name for name in written if name.endswith(".stats.json")]
    assert len(markers) == 1, "the job must be stopped after its first marker"
    assert not [name for name in written if name.endswith(".manifest.json")]
    for name in (name for name in written if name.endswith(".tar")):
        assert storage.read_bytes(join(target, name)) == (local / name).read_bytes()
    subprocess.run(command, check=True, capture_output=True, timeout=300, env=environment)
    for split in ("train", "val"):
        assert load_manifest(target, split).content_hash == load_manifest(local, split).content_hash
    assert [p for p in (tmp_path / "tmp").rglob("*") if p.is_file()] == []  # the killed job's staging removed


def test_unsigned_and_wrongly_signed_requests_are_refused_and_a_wrong_secret_is_one_line_naming_the_url(
    synthetic_shards: tuple[Path, Path], bucket: str, s3_endpoint: str
) -> None:
    """The server takes only the session's keys: an unsigned request is refused (403), the right keys
    shard into the bucket, a wrong secret is one line (exit 1) that names the URL and never the secret."""
    videos, _ = synthetic_shards
    unsigned = subprocess.run(
        ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"{s3_endpoint}/{bucket[5:]}"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert unsigned.stdout == "403"
    arguments = ["shard", str(videos / "annotations.csv"), f"{bucket}/shards", "--set=shard.processes=1"]
    assert run_vidtx(*arguments).returncode == 0
    secret = os.environ["AWS_SECRET_ACCESS_KEY"]
    wrong = "not-the-secret-" + secret[:4]
    result = run_vidtx(*arguments, AWS_SECRET_ACCESS_KEY=wrong)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"error: {bucket}/shards: access denied at {s3_endpoint} (check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)"
    ]
    assert wrong not in result.stdout + result.stderr


def test_a_cache_folder_keeps_the_shards_read_from_a_bucket_within_its_limit(
    synthetic_shards: tuple[Path, Path], bucket_shards: str, s3_log: Path, tmp_path: Path
) -> None:
    """`data.cache_dir`: the first pass downloads each tar once (checked against the object's size),
    the next reads the copies (a HEAD per tar, no GET); past `cache_gb` the least recently used go."""
    _, local = synthetic_shards
    remote = load_manifest(bucket_shards, "val")
    cache = tmp_path / "cache"
    data = DataConfig(
        shards=location(bucket_shards),
        num_frames=4,
        short_side=32,
        crop_size=32,
        num_workers=0,
        cache_dir=cache,
    )
    reference = list(
        build_eval_loader(data.model_copy(update={"shards": local, "cache_dir": None}), "val", batch_size=4)
    )
    for pass_index in range(2):
        mark = s3_log.stat().st_size
        batches = list(build_eval_loader(data, "val", batch_size=4))
        assert [keys for _, _, keys in batches] == [keys for _, _, keys in reference]
        assert all(torch.equal(a[0], b[0]) for a, b in zip(batches, reference, strict=True))
        tar_gets = [r for r in requests(s3_log, mark) if r.startswith("GET") and r.endswith(".tar")]
        assert len(tar_gets) == (len(remote.shards) if pass_index == 0 else 0)
    cached = sorted(p.name.split("-", 1)[1] for p in cache.iterdir() if is_cached_tar(p))
    assert cached == [shard.name for shard in remote.shards]
    largest = max(shard.bytes for shard in remote.shards)
    limited = data.model_copy(update={"cache_gb": 1.5 * largest / 1e9, "cache_dir": tmp_path / "small"})
    list(build_eval_loader(limited, "val", batch_size=4))
    kept = [p.stat().st_size for p in (tmp_path / "small").iterdir() if is_cached_tar(p)]
    assert 1 <= len(kept) < len(remote.shards)
    assert sum(kept) <= 1.5 * largest


def test_a_shard_rewritten_in_place_with_the_same_size_is_fetched_again(bucket: str, tmp_path: Path) -> None:
    """Issue 43 case 5: the cache trusted a copy whose size equalled the object's; a shard re-written
    with other options and the same member sizes was served stale. The modification time decides too."""
    url = f"{bucket}/shards/train-000000.tar"
    cache = ShardCache(tmp_path / "cache", max_bytes=10**9)
    storage.write_text(url, "A" * 1000)
    assert cache.local_copy(url).read_bytes() == b"A" * 1000
    assert cache.local_copy(url).read_bytes() == b"A" * 1000  # the copy, as long as the object is the same
    time.sleep(1.1)  # S3's Last-Modified counts whole seconds
    storage.write_text(url, "B" * 1000)
    copy = cache.local_copy(url)
    assert copy.read_bytes() == b"B" * 1000
    assert storage.file_state(copy) == storage.file_state(url)  # the object's size and modification time


def test_the_configs_endpoint_overrides_the_environments(
    synthetic_shards: tuple[Path, Path], bucket: str, s3_endpoint: str
) -> None:
    """`storage.endpoint_url` wins over AWS_ENDPOINT_URL, in the command and in its shard writers."""
    videos, _ = synthetic_shards
    closed = f"http://127.0.0.1:{free_port()}"
    override = f"--set=storage.endpoint_url={s3_endpoint}"
    result = run_vidtx(
        "shard", str(videos / "annotations.csv"), f"{bucket}/shards", override, AWS_ENDPOINT_URL=closed
    )
    assert result.returncode == 0, result.stderr
    assert find_splits(f"{bucket}/shards") == ["train", "val"]
