"""Fetching shards from a bucket ahead of the reader (`data.fetch_ahead`): within the cache's share,
each shard once, through the session's S3 server; and, without a cache, reading frames-store samples
ahead of the decoder (`data.read_ahead`)."""

import hashlib
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from infra.local.latency_proxy import latency_proxy, requests
from infra.local.ports import free_port
from vidtx import storage
from vidtx.cache import ShardCache, is_cached_tar
from vidtx.config import DataConfig
from vidtx.data.fetch_ahead import FetchAhead, FetchSettings
from vidtx.data.shares import epoch_shards
from vidtx.data.train_loader import build_train_loader
from vidtx.locations import location
from vidtx.manifest import load_manifest
from vidtx.storage import name_of, objects

pytestmark = pytest.mark.slow

PART = 8192  # bytes per ranged GET: several for each of the session's small shards


def tar_gets(s3_log: Path, since: int) -> dict[str, int]:
    """GET requests per tar name in the S3 server's log since byte `since`."""
    counts: dict[str, int] = {}
    for request in requests(s3_log, since):
        if request.startswith("GET") and request.endswith(".tar"):
            counts[name_of(request.split()[1])] = counts.get(name_of(request.split()[1]), 0) + 1
    return counts


def cached_bytes(folder: Path) -> int:
    return sum(file.stat().st_size for file in folder.iterdir() if is_cached_tar(file))


def test_fetch_ahead_fetches_the_next_shards_within_its_budget_each_once_in_parts(
    bucket_shards: str, s3_log: Path, tmp_path: Path
) -> None:
    manifest = load_manifest(bucket_shards, "train")
    urls, shards = manifest.shard_urls(), {shard.name: shard for shard in manifest.shards}
    sizes = {url: shards[name_of(url)].bytes for url in urls}
    budget = int(2.5 * max(sizes.values()))  # the one being read and one or two ahead
    cache = ShardCache(tmp_path / "cache", max_bytes=budget)
    fetcher = FetchAhead(
        cache, FetchSettings(ahead=3, requests=4, part_bytes=PART, budget=budget, sizes=sizes)
    )
    mark = s3_log.stat().st_size
    try:
        fetcher.plan(urls)
        for index, url in enumerate(urls):
            path = fetcher.local_copy(url)
            assert hashlib.sha256(path.read_bytes()).hexdigest() == shards[name_of(url)].sha256
            assert fetcher.held() <= budget
            assert cached_bytes(cache.folder) <= budget
            if index == 0:  # the next shard arrives without being asked for
                deadline = time.monotonic() + 30
                while not any(
                    name_of(urls[1]) in file.name for file in cache.folder.iterdir() if is_cached_tar(file)
                ):
                    assert time.monotonic() < deadline, "the next shard was not fetched ahead"
                    time.sleep(0.05)
    finally:
        fetcher.close()
    expected = {name_of(url): math.ceil(size / PART) for url, size in sizes.items()}
    assert tar_gets(s3_log, mark) == expected  # every shard once, in parts


def test_a_ranks_dataloader_workers_fetch_its_shard_of_each_epoch_once(
    bucket_shards: str, s3_log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 0 of 5 has one shard of the 5 each epoch, which both of its DataLoader workers read: one
    fetch (the other waits for the cache's lock), none when an earlier epoch fetched it."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "5")
    data = DataConfig(
        shards=location(bucket_shards),
        num_frames=4,
        short_side=32,
        crop_size=32,
        num_workers=2,
        cache_dir=tmp_path / "cache",
        fetch_part_mb=PART / 2**20,
    )
    loader = build_train_loader(data, batch_size=2, seed=2)  # its deals: shards 2, 0, 0
    manifest = load_manifest(bucket_shards, "train")
    sizes = {shard.name: shard.bytes for shard in manifest.shards}
    fetched: set[str] = set()
    for epoch in range(3):
        mark = s3_log.stat().st_size
        assert len(list(loader)) == len(loader)
        (shard,) = (name_of(url) for url in epoch_shards(manifest.shard_urls(), 2, epoch, 0, 5))
        assert tar_gets(s3_log, mark) == ({} if shard in fetched else {shard: math.ceil(sizes[shard] / PART)})
        fetched.add(shard)
    assert len(fetched) == 2  # the third epoch read the second's copy


def test_two_readers_wanting_one_shard_at_once_fetch_it_once(bucket_shards: str, tmp_path: Path) -> None:
    """The second waits on the shard's lock while the first downloads it, then finds the copy (as
    two processes of a node do: each opens the lock file, and flock locks open files)."""
    (url, *_) = load_manifest(bucket_shards, "train").shard_urls()
    cache = ShardCache(tmp_path / "cache", max_bytes=10**9)
    downloads: list[str] = []

    def slow_download(url: str, local: Path, size: int) -> None:
        downloads.append(url)
        time.sleep(0.5)  # both readers are in local_copy by now
        storage.download(url, local)

    with ThreadPoolExecutor(2) as pool:
        copies = list(pool.map(lambda _: cache.local_copy(url, slow_download), range(2)))
    assert downloads == [url]
    assert copies[0] == copies[1]


def test_the_frames_store_read_without_a_cache_keeps_read_ahead_requests_in_flight(
    bucket_frames_shards: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No cache: a clip's frames (32-px JPEGs, well within the merge slack of each other) are one ranged
    GET, and with `data.read_ahead` = 4 four of them wait
    on the bucket (50 ms away, through the latency proxy) at once, never more; the epoch's batches
    are those of reading one sample at a time."""
    in_flight, most, lock = 0, 0, threading.Lock()
    read_range = objects.read_range

    def counted(where: str, start: int, end: int) -> bytes:
        nonlocal in_flight, most
        with lock:
            in_flight += 1
            most = max(most, in_flight)
        try:
            return read_range(where, start, end)
        finally:
            with lock:
                in_flight -= 1

    monkeypatch.setattr(objects, "read_range", counted)  # each ranged GET (`storage.read_ranges` makes them)
    data = DataConfig(
        shards=location(bucket_frames_shards), num_frames=4, short_side=32, crop_size=32, num_workers=0
    )
    server_port = int(os.environ["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])
    epochs, most_in_flight = [], []
    with latency_proxy(free_port(), server_port, 50) as slow_bucket:
        monkeypatch.setenv("AWS_ENDPOINT_URL", slow_bucket)
        for read_ahead in (0, 4):
            most = 0
            loader = build_train_loader(
                data.model_copy(update={"read_ahead": read_ahead}), batch_size=4, seed=0
            )
            epochs.append(list(loader))
            most_in_flight.append(most)
    assert most_in_flight == [1, 4]
    assert len(epochs[0]) == len(epochs[1]) == 6  # 24 videos
    for (clips, labels, keys), (ahead_clips, ahead_labels, ahead_keys) in zip(*epochs, strict=True):
        assert keys == ahead_keys
        assert torch.equal(labels, ahead_labels)
        assert torch.equal(clips, ahead_clips)
