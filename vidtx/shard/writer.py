"""Writing one planned shard (idempotent) and finalizing a split's manifest from its shards' results.

The steps are apart so that an orchestrator can map `write_shard` over the plan (a Prefect task per
shard); the shard stage (`vidtx.stages.shard`) runs them with a process pool or Ray tasks.

* `plan_shards` (`plan.py`) is pure: which video goes into which shard under which key.
* `write_shard` probes every video (and re-encodes it when asked) in a time-limited child process,
  writes the good ones with `webdataset.TarWriter` to `<name>.tmp`, renames it when complete, writes
  `<name>.stats.json` (the completion marker, holding the shard's counts and rejects). Tar members
  carry fixed mtime/owner/mode, so the same input gives byte-identical tars. A shard whose marker
  matches the plan and the source files (size and mtime) and whose tar still has the recorded
  sha256 is skipped.
* `finalize_split` writes `<split>.rejects.jsonl` and then `<split>.manifest.json`; loaders read the
  manifest, so a killed run is never mistaken for a complete one.

No single video or annotation row stops the job: bad ones are rejects with a reason; only more than
`max_reject_fraction` of them fails a split, with the reasons counted in the error.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections import Counter
from pathlib import Path

import webdataset as wds
from pydantic import BaseModel, Field

from vidtx import storage
from vidtx.config import ShardConfig
from vidtx.files import replaced
from vidtx.locations import Location, location
from vidtx.manifest import (
    Manifest,
    Reject,
    ShardInfo,
    content_hash,
    index_name,
    manifest_path,
    reason_counts,
    rejects_path,
)
from vidtx.shard.plan import ShardItem, ShardSpec
from vidtx.shard.prepare import RejectedVideoError, VideoPreparer
from vidtx.shard.records import UNLABELLED
from vidtx.shard.tars import member_index, write_sample
from vidtx.storage import join

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
    counts_per_class: dict[str, int]  # written videos per class name, every label counted (none: omitted)
    rejects: list[Reject]
    class_names: list[str]  # the plan's label map, so finalizing needs nothing but the results
    multi_label: bool = False  # the plan's: samples carry label sets
    fingerprint: str  # `shard_fingerprint`: the plan, processing and source files the tar was written from
    # True when `write_shard` found the shard complete and did not write it; not saved in the marker.
    reused: bool = Field(False, exclude=True)


def stats_path(cfg: ShardConfig, spec: ShardSpec) -> Location:
    return join(cfg.output, spec.name.replace(".tar", ".stats.json"))


def shard_fingerprint(spec: ShardSpec, cfg: ShardConfig) -> str:
    """The plan and processing of a shard (`ShardSpec.fingerprint`) and the state of each of its
    source files: a re-run rebuilds a shard when a video in it was fixed, replaced or removed."""
    sources = storage.file_states([location(item.path) for item in spec.items])
    return hashlib.sha256(json.dumps([spec.fingerprint(cfg), sources]).encode()).hexdigest()


def _finished(spec: ShardSpec, cfg: ShardConfig, fingerprint: str) -> ShardResult | None:
    """The recorded result when the shard is complete, from this plan and intact (in a bucket: the
    recorded size; an object is only ever whole, and checking its sha256 would download it)."""
    stats, tar = stats_path(cfg, spec), join(cfg.output, spec.name)
    if not storage.is_file(stats):
        return None
    result = ShardResult.model_validate_json(storage.read_text(stats))
    if result.fingerprint != fingerprint or not storage.holds(tar, result.bytes, result.sha256):
        return None
    return result.model_copy(update={"reused": True})


def _video_file(item: ShardItem, downloads: contextlib.ExitStack) -> Path:
    """The item's video as a file on this machine (from a bucket: downloaded, removed when
    `downloads` closes); RejectedVideoError when its row has a problem or its object is missing."""
    if item.problem is not None:
        raise RejectedVideoError(item.problem)
    try:
        return downloads.enter_context(storage.local_copy(location(item.path)))
    except FileNotFoundError:
        raise RejectedVideoError("missing: no such object") from None


def _sample(
    item: ShardItem, video_file: Path, spec: ShardSpec, cfg: ShardConfig, preparer: VideoPreparer
) -> dict[str, str | bytes | Path]:
    """The tar members of one video, after probing (and re-encoding); raises RejectedVideoError."""
    video = preparer.prepare(video_file, cfg)
    info = video.info
    if info.num_frames < cfg.min_frames:
        raise RejectedVideoError(f"too short: {info.num_frames} frames < min_frames {cfg.min_frames}")
    meta = {
        "label": item.label,
        "label_name": spec.class_names[item.label] if item.label != UNLABELLED else None,
        "key": item.source_key,
        "source": item.source,
        "frames": info.num_frames,
        "fps": round(info.fps, 6),
        "duration": round(info.duration, 6),
        "width": info.width,
        "height": info.height,
        "reencoded": cfg.reencode is not None,
        "open_gop": info.open_gop,  # its clips are decoded by segments (`vidtx.data.samples`)
        "store": cfg.store,
        **video.extra,
    }
    if item.labels is not None:  # a multi-label split: every label (`label` is the first)
        meta |= {"labels": list(item.labels), "label_names": [spec.class_names[i] for i in item.labels]}
    return {"__key__": item.key, **video.members, "json": json.dumps(meta, sort_keys=True).encode()}


def write_shard(spec: ShardSpec, cfg: ShardConfig) -> ShardResult:
    """Write one shard (idempotent: a finished, intact shard from the same plan is not rewritten);
    a video whose probe (and re-encode) takes more than `cfg.probe_timeout_s` is rejected."""
    fingerprint = shard_fingerprint(spec, cfg)
    done = _finished(spec, cfg, fingerprint)
    if done is not None:
        log.debug("%s: already complete, skipped", spec.name)
        return done
    # The split's manifest no longer describes the tars once one is rewritten.
    storage.delete(manifest_path(cfg.output, spec.split))
    with storage.staged(join(cfg.output, spec.name)) as tar:
        result = _write_tar(tar, spec, cfg, fingerprint)
        index = member_index(tar) if cfg.store == "frames" else None
    if index is not None:  # before the marker: a shard with a marker has its index
        storage.write_text(join(cfg.output, index_name(spec.name)), index.model_dump_json())
    storage.write_text(stats_path(cfg, spec), result.model_dump_json(indent=2))  # after the tar
    log.info("%s", shard_line(result))
    return result


def shard_line(result: ShardResult) -> str:
    """What `write_shard` did, in one line (the log and the shard-dataset flow's)."""
    done = "reused (complete from the same plan)" if result.reused else "written"
    return (
        f"{result.name} {done}: {result.samples} samples, {len(result.rejects)} rejected, "
        f"{result.bytes / 1e6:.1f} MB"
    )


def split_line(manifest: Manifest) -> str:
    """What `finalize_split` wrote, in one line (the log and the shard-dataset flow's)."""
    return (
        f"{manifest.split}: {manifest.num_samples} samples in {len(manifest.shards)} shards, "
        f"{len(manifest.rejects)} rejected"
    )


def _write_tar(tar: Path, spec: ShardSpec, cfg: ShardConfig, fingerprint: str) -> ShardResult:
    """Write the shard's tar at `tar` (complete or absent) and return what it holds."""
    counts: Counter[str] = Counter()
    rejects, written = [], 0
    with (
        replaced(tar) as temporary,  # removed when writing fails: the tar is complete or absent
        VideoPreparer(cfg.probe_timeout_s) as preparer,
        wds.TarWriter(
            str(temporary), user="vidtx", group="vidtx", mode=0o444, mtime=0, encoder=False
        ) as writer,
    ):
        for item in spec.items:
            try:
                with contextlib.ExitStack() as downloads:  # only the process that writes a shard downloads
                    write_sample(writer, _sample(item, _video_file(item, downloads), spec, cfg, preparer))
            except RejectedVideoError as err:
                rejects.append(
                    Reject(key=item.source_key, path=item.source, label=item.label, reason=str(err))
                )
                log.warning("%s: rejected %s: %s", spec.name, item.source, err)
                continue
            written += 1
            counts.update(spec.class_names[label] for label in item.label_ids)  # every label of the video
    return ShardResult(
        name=spec.name,
        split=spec.split,
        samples=written,
        bytes=tar.stat().st_size,
        sha256=storage.sha256(tar),
        counts_per_class=dict(sorted(counts.items())),
        rejects=rejects,
        class_names=list(spec.class_names),
        multi_label=spec.multi_label,
        fingerprint=fingerprint,
    )


def finalize_split(cfg: ShardConfig, split: str, results: list[ShardResult]) -> Manifest:
    """Write `<split>.rejects.jsonl` and `<split>.manifest.json` from the results of every shard."""
    results = sorted((r for r in results if r.split == split), key=lambda r: r.name)
    if not results:
        raise ValueError(f"{split}: no shard results to finalize")
    class_names = results[0].class_names
    rejects = [reject for result in results for reject in result.rejects]
    storage.write_text(rejects_path(cfg.output, split), "".join(r.model_dump_json() + "\n" for r in rejects))
    planned = sum(r.samples for r in results) + len(rejects)
    if planned and len(rejects) / planned > cfg.max_reject_fraction:
        reasons = ", ".join(f"{count} x {reason}" for reason, count in reason_counts(rejects))
        raise ShardingError(
            f"{split}: {len(rejects)} of {planned} videos rejected (> max_reject_fraction "
            f"{cfg.max_reject_fraction}): {reasons}; see {rejects_path(cfg.output, split)}"
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
        multi_label=results[0].multi_label,
        config=cfg.model_dump(mode="json"),
        content_hash=content_hash(shards, class_names),
    )
    manifest.save(cfg.output)
    log.info("%s", split_line(manifest))
    return manifest
