"""Turning a video dataset into WebDataset tars: plan, write shards in parallel, finalize manifests.

The job is split so that an orchestrator can map `write_shard` over the plan (a Prefect task per
shard); `shard_dataset` does the same with a process pool.

* `plan_shards` (`plan.py`) is pure: which video goes into which shard under which key.
* `write_shard` probes every video (and re-encodes it when asked) in a time-limited child process,
  writes the good ones with `webdataset.TarWriter` to `<name>.tmp`, renames it when complete, writes
  `<name>.stats.json` (the completion marker, holding the shard's counts and rejects). Tar members
  carry fixed mtime/owner/mode, so the same input gives byte-identical tars. A shard whose marker
  matches the plan and whose tar still has the recorded sha256 is skipped.
* `finalize_split` writes `<split>.rejects.jsonl` and then `<split>.manifest.json`; loaders read the
  manifest, so a killed run is never mistaken for a complete one.

No single video or annotation row stops the job: bad ones are rejects with a reason; only more than
`max_reject_fraction` of them fails a split, with the reasons counted in the error.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from concurrent.futures import ProcessPoolExecutor, as_completed
from functools import partial
from multiprocessing import get_context
from pathlib import Path

import webdataset as wds
from pydantic import BaseModel

from vidtx.config import ShardConfig
from vidtx.log import setup_logging, track
from vidtx.manifest import (
    Manifest,
    Reject,
    ShardInfo,
    content_hash,
    file_sha256,
    manifest_path,
    reason_counts,
)
from vidtx.shard.plan import ShardItem, ShardSpec, plan_shards
from vidtx.shard.prepare import RejectedVideoError, VideoPreparer

log = logging.getLogger(__name__)


class ShardingError(ValueError):
    """The job cannot produce a trustworthy split (e.g. too many bad videos)."""


class ShardResult(BaseModel):
    """What `write_shard` wrote, handed to `finalize_split`; also saved as `<name>.stats.json`,
    the shard's completion marker, so a rerun can skip the shard."""

    name: str  # tar file name, relative to `cfg.output`
    split: str
    samples: int  # videos written (rejects excluded)
    bytes: int  # size of the tar file
    sha256: str  # hex digest of the tar file
    counts_per_class: dict[str, int]  # written videos per class name (classes with none omitted)
    rejects: list[Reject]
    class_names: list[str]  # the plan's label map, so finalizing needs nothing but the results
    fingerprint: str  # `ShardSpec.fingerprint`: the plan and processing the tar was written from


def _stats_path(cfg: ShardConfig, spec: ShardSpec) -> Path:
    return cfg.output / spec.name.replace(".tar", ".stats.json")


def _finished(spec: ShardSpec, cfg: ShardConfig, fingerprint: str) -> ShardResult | None:
    """The recorded result when the shard on disk is complete, from this plan and intact."""
    stats, tar = _stats_path(cfg, spec), cfg.output / spec.name
    if not (stats.is_file() and tar.is_file()):
        return None
    result = ShardResult.model_validate_json(stats.read_text())
    intact = tar.stat().st_size == result.bytes and file_sha256(tar) == result.sha256
    return result if result.fingerprint == fingerprint and intact else None


def _sample(
    item: ShardItem, spec: ShardSpec, cfg: ShardConfig, preparer: VideoPreparer
) -> dict[str, str | bytes]:
    """The tar members of one video, after probing (and re-encoding); raises RejectedVideoError."""
    if item.problem is not None:
        raise RejectedVideoError(item.problem)
    video = preparer.prepare(Path(item.path), cfg)
    info = video.info
    if info.num_frames < cfg.min_frames:
        raise RejectedVideoError(f"too short: {info.num_frames} frames < min_frames {cfg.min_frames}")
    meta = {
        "label": item.label,
        "label_name": spec.class_names[item.label],
        "key": item.source_key,
        "source": item.source,
        "frames": info.num_frames,
        "fps": round(info.fps, 6),
        "duration": round(info.duration, 6),
        "width": info.width,
        "height": info.height,
        "reencoded": cfg.reencode is not None,
        "store": cfg.store,
        **video.extra,
    }
    return {"__key__": item.key, **video.members, "json": json.dumps(meta, sort_keys=True).encode()}


def write_shard(spec: ShardSpec, cfg: ShardConfig) -> ShardResult:
    """Write one shard (idempotent: a finished, intact shard from the same plan is not rewritten);
    a video whose probe (and re-encode) takes more than `cfg.probe_timeout_s` is rejected."""
    fingerprint = spec.fingerprint(cfg)
    done = _finished(spec, cfg, fingerprint)
    if done is not None:
        log.debug("%s: already complete, skipped", spec.name)
        return done
    cfg.output.mkdir(parents=True, exist_ok=True)
    # The split's manifest no longer describes the tars once one is rewritten.
    manifest_path(cfg.output, spec.split).unlink(missing_ok=True)
    tar, temporary = cfg.output / spec.name, cfg.output / f"{spec.name}.tmp"
    counts: Counter[str] = Counter()
    rejects = []
    with (
        VideoPreparer(cfg.probe_timeout_s) as preparer,
        wds.TarWriter(
            str(temporary), user="vidtx", group="vidtx", mode=0o444, mtime=0, encoder=False
        ) as writer,
    ):
        for item in spec.items:
            try:
                sample = _sample(item, spec, cfg, preparer)
            except RejectedVideoError as err:
                rejects.append(
                    Reject(key=item.source_key, path=item.source, label=item.label, reason=str(err))
                )
                log.warning("%s: rejected %s: %s", spec.name, item.source, err)
                continue
            writer.write(sample)
            counts[spec.class_names[item.label]] += 1
    result = ShardResult(
        name=spec.name,
        split=spec.split,
        samples=sum(counts.values()),
        bytes=temporary.stat().st_size,
        sha256=file_sha256(temporary),
        counts_per_class=dict(sorted(counts.items())),
        rejects=rejects,
        class_names=list(spec.class_names),
        fingerprint=fingerprint,
    )
    os.replace(temporary, tar)
    stats = _stats_path(cfg, spec)
    stats.with_suffix(".tmp").write_text(result.model_dump_json(indent=2))
    os.replace(stats.with_suffix(".tmp"), stats)
    log.info(
        "%s: %d samples, %d rejected, %.1f MB", spec.name, result.samples, len(rejects), result.bytes / 1e6
    )
    return result


def finalize_split(cfg: ShardConfig, split: str, results: list[ShardResult]) -> Manifest:
    """Write `<split>.rejects.jsonl` and `<split>.manifest.json` from the results of every shard."""
    results = sorted((r for r in results if r.split == split), key=lambda r: r.name)
    if not results:
        raise ValueError(f"{split}: no shard results to finalize")
    class_names = results[0].class_names
    rejects = [reject for result in results for reject in result.rejects]
    with (cfg.output / f"{split}.rejects.jsonl").open("w") as file:
        file.writelines(reject.model_dump_json() + "\n" for reject in rejects)
    planned = sum(r.samples for r in results) + len(rejects)
    if planned and len(rejects) / planned > cfg.max_reject_fraction:
        reasons = ", ".join(f"{count} x {reason}" for reason, count in reason_counts(rejects))
        raise ShardingError(
            f"{split}: {len(rejects)} of {planned} videos rejected (> max_reject_fraction "
            f"{cfg.max_reject_fraction}): {reasons}; see {cfg.output / f'{split}.rejects.jsonl'}"
        )
    counts = Counter(dict.fromkeys(class_names, 0))
    for result in results:
        counts.update(result.counts_per_class)
    shards = [ShardInfo(name=r.name, samples=r.samples, bytes=r.bytes, sha256=r.sha256) for r in results]
    manifest = Manifest(
        split=split,
        shards=shards,
        num_samples=sum(shard.samples for shard in shards),
        class_names=class_names,
        counts_per_class=dict(counts),
        rejects=rejects,
        store=cfg.store,
        config=cfg.model_dump(mode="json"),
        content_hash=content_hash(shards, class_names),
    )
    manifest.save(cfg.output)
    log.info(
        "%s: %d samples in %d shards, %d rejected", split, manifest.num_samples, len(shards), len(rejects)
    )
    return manifest


def shard_dataset(cfg: ShardConfig) -> dict[str, Manifest]:
    """Plan, write every shard with `cfg.processes` processes, and finalize every split."""
    specs = plan_shards(cfg)
    write = partial(write_shard, cfg=cfg)
    results: list[ShardResult]
    if cfg.processes == 1:
        results = [write(spec) for spec in track(specs, "shards", total=len(specs))]
    else:
        # forkserver: workers start clean (no inherited decoder or thread state from the parent).
        context, level = get_context("forkserver"), logging.getLogger().level
        with ProcessPoolExecutor(
            cfg.processes, context, initializer=setup_logging, initargs=(level,)
        ) as pool:
            futures = [pool.submit(write, spec) for spec in specs]
            results = [
                future.result() for future in track(as_completed(futures), "shards", total=len(futures))
            ]
    splits = dict.fromkeys(spec.split for spec in specs)
    return {split: finalize_split(cfg, split, results) for split in splits}
