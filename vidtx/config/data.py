"""Data sections: the synthetic dataset, sharding (the write side) and loading (the read side)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from vidtx.config.base import StrictModel
from vidtx.locations import StorageLocation

DatasetFormat = Literal["folder", "kinetics", "ssv2", "csv", "json", "unlabeled"]
SamplingMode = Literal["segment", "dense"]
Store = Literal["video", "frames"]
ShardExecutor = Literal["processes", "ray"]
CropMode = Literal["random_resized", "scale_jitter"]
Balance = Literal["none", "classes"]


class ReencodeConfig(StrictModel):
    """`shard.reencode`: how the shard stage re-encodes each video (H.264 MP4) before packing it.

    Small frames and short GOPs make sparse frame sampling cheap to decode at training time. Read by
    `write_shard` for every video; part of each shard's fingerprint (a change rewrites the shards)."""

    short_side: int = Field(256, ge=16, description="Resize so the shorter side has this many pixels.")
    fps: float | None = Field(None, gt=0, description="Resample to this frame rate (None keeps it).")
    max_seconds: float | None = Field(None, gt=0, description="Cut clips to at most this long.")
    keyframe_interval: int = Field(16, ge=1, description="GOP size: a keyframe every N frames.")
    crf: int = Field(23, ge=0, le=51, description="libx264 constant rate factor.")


class SynthConfig(StrictModel):
    """`synth`: a generated dataset of real MP4 files whose class only the frame order tells.

    Read by `vidtx synth` and, when set in the pipeline config, by the shard flow, which generates the
    dataset (unless its annotations.csv exists) before sharding it.
    """

    output: Path = Field(Path("data/synthetic"), description="Folder for videos + annotations.csv.")
    videos_per_class: dict[str, int] = Field(
        default_factory=lambda: {"train": 48, "val": 12, "test": 12},
        description="Videos per class in each split.",
    )
    classes: list[str] | None = Field(None, description="Subset of motion classes (None: all).")
    num_frames: int = Field(16, ge=2, description="Frames per video.")
    size: int = Field(64, ge=16, multiple_of=2, description="Frame height and width in pixels (even: H.264).")
    fps: int = Field(12, ge=1, description="Frame rate written into the MP4s.")
    seed: int = Field(0, description="Seeds the generated motions.")
    objects_per_video: int = Field(
        1, ge=1, le=4, description="Moving shapes per video, one label each (2 or more: label_separator '|')."
    )


class ShardConfig(StrictModel):
    """`shard`: turning a video dataset into WebDataset tars plus one manifest per split.

    Read by the shard stage (`vidtx shard`, the shard flow): planning, per-shard writing and
    finalizing. The whole section is recorded in each split's manifest (`Manifest.config`).
    """

    source: StorageLocation = Field(
        Path("data/synthetic/annotations.csv"),
        description="Dataset root or annotation file: a path, or a bucket prefix or object (s3://, gs://).",
    )
    format: DatasetFormat = Field(
        "csv",
        description="Layout of the source dataset: folder (class folders), kinetics, ssv2, csv (path, label), "
        "json ([{path, label}], label: a name or names), unlabeled (a folder or path list: pretraining).",
    )
    label_separator: str | None = Field(
        None, min_length=1, description="csv, kinetics: labels are sets split on this ('|'): multi-label."
    )
    video_root: StorageLocation | None = Field(
        None, description="Where annotation formats find the videos (None: the annotation file's folder)."
    )
    output: StorageLocation = Field(
        Path("data/shards"),
        description="Folder or bucket prefix (s3://, gs://) for SPLIT-NNNNNN.tar and manifests.",
    )
    splits: list[str] | None = Field(None, description="Splits to shard (None: every split in the source).")
    max_samples_per_shard: int = Field(
        1000, ge=1, le=1_000_000, description="Cap on the videos in one shard."
    )
    max_bytes_per_shard: int = Field(
        1_000_000_000, ge=1_000_000, description="Cap on the source video bytes packed into one shard."
    )
    processes: int = Field(2, ge=1, description="Parallel probe/encode processes (executor `processes`).")
    executor: ShardExecutor = Field(
        "processes",
        description="Where the shards are written: this machine's process pool (processes), or one Ray "
        "task per shard on a Ray cluster (ray; see ray_address), each retried elsewhere when its node is lost.",
    )
    ray_address: str | None = Field(
        None,
        description="Executor ray: the cluster to join, as ray.init takes it (host:port of the GCS, "
        "ray://host:10001, 'auto', 'local': a Ray started here); None: RAY_ADDRESS when it names a "
        "cluster, else a Ray started here.",
    )
    cpus_per_task: float = Field(
        1.0, gt=0, description="Executor ray: CPUs a shard's task reserves (its probe or re-encode runs one)."
    )
    seed: int = Field(0, description="Seeds the (deterministic) sample order.")
    min_frames: int = Field(4, ge=1, description="Shorter videos are rejected.")
    max_reject_fraction: float = Field(
        0.2, ge=0.0, le=1.0, description="Fail the job when more than this fraction of videos is bad."
    )
    reencode: ReencodeConfig | None = Field(
        None, description="Re-encode videos (None: copy bytes as they are)."
    )
    classes: list[str] | None = Field(
        None, description="The label set (None: every label in the annotations); other labels are rejects."
    )
    classes_file: StorageLocation | None = Field(
        None,
        description="The label set from a file, one class name a line in label-id order (e.g. the order a "
        "released model was trained with); instead of `classes`.",
    )
    max_video_mb: float = Field(
        4096,
        gt=0,
        description="Per video: a larger file is rejected (files are streamed into the tars, never read "
        "whole, but a shard should not be dominated by one file).",
    )
    probe_timeout_s: float = Field(
        600.0, gt=0, description="Per video: a probe (and re-encode) that takes longer is rejected."
    )
    store: Store = Field(
        "video",
        description="What a sample holds. video: the video bytes (copied, or re-encoded with `reencode`); "
        "frames: JPEG frames at `fps` with short side `short_side` (decoded and converted once).",
    )
    fps: float | None = Field(
        None, gt=0, description="Frames store: resample to this rate (None: the source's)."
    )
    short_side: int = Field(
        256, ge=16, description="Frames store: short side of the frames (never upscaled)."
    )
    jpeg_quality: int = Field(90, ge=1, le=100, description="Frames store: JPEG quality (libjpeg scale).")

    @model_validator(mode="after")
    def _settings_agree(self) -> ShardConfig:
        if self.classes is not None and self.classes_file is not None:
            raise ValueError("set classes or classes_file, not both")
        if self.label_separator is not None and self.format not in ("csv", "kinetics"):
            raise ValueError(f"label_separator applies to formats csv and kinetics, not {self.format}")
        if self.store == "frames" and self.reencode is not None:
            raise ValueError("reencode applies to store 'video'; the frames store takes fps and short_side")
        return self

    @field_validator("ray_address")
    @classmethod
    def _a_cluster_not_a_jobs_api(cls, address: str | None) -> str | None:
        if address is not None and address.startswith(("http://", "https://")):
            raise ValueError(
                f"{address} is a Ray Jobs API (it runs jobs, not tasks); give the cluster's GCS "
                "(host:6379) or Ray Client (ray://host:10001) address"
            )
        return address


class RandAugmentConfig(StrictModel):
    """`data.rand_augment`: RandAugment as VideoMAE fine-tunes (rand-m7-n4), one draw per clip."""

    magnitude: float = Field(
        7.0, ge=0, le=10, description="Strength of every operation, 0-10 (timm's scale)."
    )
    num_ops: int = Field(4, ge=1, le=8, description="Operations applied to each clip, drawn uniformly.")


class SourceConfig(StrictModel):
    """One entry of data.sources: a shard set whose training split is mixed in, and its weight."""

    shards: StorageLocation = Field(
        description="Folder or bucket prefix (s3://, gs://) written by vidtx shard."
    )
    weight: float = Field(
        1.0, gt=0, description="Its share of the training samples, against the others' weights."
    )


class DataConfig(StrictModel):
    """`data`: reading shards into uint8 clip batches (B, T, H, W, C), normalised on the device.

    Read by training (the loaders; T and crop size also size the model), evaluation and prediction
    (view sampling, normalisation) and registration (model signature and card). The pipeline flow
    points `shards` at `shard.output`.
    """

    shards: StorageLocation = Field(
        Path("data/shards"), description="Folder or bucket prefix (s3://, gs://) written by `vidtx shard`."
    )
    sources: list[SourceConfig] = Field(
        default_factory=list,
        description="Shard sets, each {shards, weight}, whose training splits are mixed by weight, labels "
        "merged by class name (empty: `shards` alone); validation and evaluation read `shards`.",
    )
    balance: Balance = Field(
        "none",
        description="classes: training draws every class equally often (samples of frequent classes are "
        "passed over); none: as often as the sources have them.",
    )
    train_split: str = Field("train", description="Split trained on.")
    val_split: str = Field("val", description="Split of the validation passes.")
    num_frames: int = Field(8, ge=1, description="Frames per clip (T).")
    sampling: SamplingMode = Field("segment", description="segment: SSv2/TSN style; dense: Kinetics style.")
    frame_stride: int = Field(4, ge=1, description="Dense sampling: frames between sampled frames.")
    short_side: int = Field(256, ge=8, description="Decode-time resize of the shorter side.")
    crop_size: int = Field(224, ge=8, description="Spatial input size (H = W).")
    scale_range: tuple[float, float] = Field((0.4, 1.0), description="Random resized crop area fraction.")
    horizontal_flip: bool = Field(False, description="Off by default: it swaps left/right classes.")
    crop: CropMode = Field(
        "random_resized",
        description="random_resized: a box of scale_range of the area, aspect 3/4-4/3; scale_jitter: "
        "the paper's random scaling by scale_jitter and a crop_size crop.",
    )
    scale_jitter: tuple[float, float] = Field((0.9, 1.3), description="Scale range of crop scale_jitter.")
    auto_augment: bool = Field(False, description="AutoAugment (ImageNet policy), one draw per clip.")
    rand_augment: RandAugmentConfig | None = Field(
        None, description="RandAugment, the same operations on every frame of a clip (None: off)."
    )
    random_erasing: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Probability of erasing a random box with noise (same box on all frames).",
    )
    mean: tuple[float, float, float] = Field(
        (0.5, 0.5, 0.5), description="Per-channel mean (RGB, 0-1 scale)."
    )
    std: tuple[float, float, float] = Field((0.5, 0.5, 0.5), description="Per-channel std (RGB, 0-1 scale).")
    num_workers: int = Field(1, ge=0, description="DataLoader worker processes per training worker.")
    decode_threads: int = Field(1, ge=0, description="decord threads per reader (0: auto).")
    shuffle_buffer: int = Field(
        64, ge=0, description="Samples the training stream is shuffled among (0: no shuffle)."
    )
    cache_dir: Path | None = Field(
        None, description="Local folder caching shards read from a bucket (None: read the bucket each time)."
    )
    cache_gb: float = Field(
        50.0, gt=0, description="Most gigabytes cache_dir holds (least recently used go)."
    )
    fetch_ahead: int = Field(
        8,
        ge=0,
        description="With cache_dir: shards of a bucket each DataLoader worker fetches ahead of the one it "
        "reads, within its share of cache_gb (0: a shard is fetched when its read starts).",
    )
    fetch_requests: int = Field(
        16, ge=1, description="Ranged GETs in flight per DataLoader worker fetching ahead."
    )
    fetch_part_mb: float = Field(4.0, gt=0, description="Megabytes per ranged GET of a shard fetched ahead.")
    read_ahead: int = Field(
        2,
        ge=0,
        description="Frames store in a bucket without cache_dir: samples whose frames each DataLoader worker "
        "reads ahead of the decoder, the ranged GETs of its clips' frames (0: one sample at a time; 2: measured "
        "best of 0-16 when a clip was one GET).",
    )
    repeated_sampling: int = Field(1, ge=1, description="Clips drawn from one decoded video.")

    def training_sources(self) -> list[SourceConfig]:
        """The shard sets training reads: `sources`, else `shards` alone."""
        return self.sources or [SourceConfig(shards=self.shards)]

    @field_validator("sources")
    @classmethod
    def _distinct_sources(cls, sources: list[SourceConfig]) -> list[SourceConfig]:
        seen = [str(source.shards) for source in sources]
        if repeated := sorted({shards for shards in seen if seen.count(shards) > 1}):
            raise ValueError(f"{', '.join(repeated)} given more than once: give a source one weight")
        return sources

    @field_validator("crop_size")
    @classmethod
    def _crop_fits(cls, crop_size: int, info: ValidationInfo) -> int:
        short_side = info.data.get("short_side")
        if short_side is not None and crop_size > short_side:
            raise ValueError(f"crop_size ({crop_size}) exceeds short_side ({short_side})")
        return crop_size

    @field_validator("rand_augment")
    @classmethod
    def _one_policy(
        cls, rand_augment: RandAugmentConfig | None, info: ValidationInfo
    ) -> RandAugmentConfig | None:
        if rand_augment is not None and info.data.get("auto_augment"):
            raise ValueError("RandAugment and auto_augment are two policies for one place: choose one")
        return rand_augment

    @field_validator("scale_range")
    @classmethod
    def _scale_is_fraction(cls, scale_range: tuple[float, float]) -> tuple[float, float]:
        low, high = scale_range
        if not 0.0 < low <= high <= 1.0:
            raise ValueError(f"must satisfy 0 < low <= high <= 1, got {scale_range}")
        return scale_range
