"""Training sections: the model to build, the optimizer and schedule, Ray and DeepSpeed."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from vidtx.config.base import StrictModel
from vidtx.locations import location

AttentionImpl = Literal["auto", "sdpa", "math"]
Precision = Literal["bf16", "fp16", "fp32"]
Placement = Literal["pack", "spread", "strict_pack", "strict_spread"]
Task = Literal["single_label", "multi_label"]
Loss = Literal["cross_entropy", "focal"]
ClassWeights = Literal["none", "balanced"]


class ModelConfig(StrictModel):
    """`model`: which network to build. Frames, crop size and classes come from the data, not here.

    Read by `vidtx.model_factory` when training builds the model, when evaluation loads a Ray
    checkpoint into it, and by `vidtx plan`; `.pt` files and registered models carry their own.
    """

    name: str = Field("xvit_tiny", description="Preset from the model registry (`vidtx models`).")
    task: Task = Field(
        "single_label",
        description="single_label: one class per video (softmax, cross entropy, top-1); multi_label: a set "
        "of classes per video (a sigmoid per class, binary cross entropy, mAP), for data sharded with "
        "label sets (shard.label_separator, or the json format's lists).",
    )
    attention_impl: AttentionImpl = Field(
        "auto", description="auto/sdpa: torch scaled_dot_product_attention (fused); math: explicit softmax."
    )
    drop_path_rate: float = Field(0.0, ge=0.0, lt=1.0, description="Stochastic depth, linearly over depth.")
    head_dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout before the classifier.")
    pretrained: str | None = Field(
        None, description="Image-ViT state dict (timm key names) to initialise the spatial backbone."
    )
    checkpoint: str | None = Field(
        None,
        description="A released X-ViT checkpoint (github.com/1adrianb/video-transformers) loaded into the "
        "model before training or evaluation; its classifier is kept when the class counts agree.",
    )
    options: dict[str, int | float | str | bool] = Field(
        default_factory=dict,
        description="Extra keyword arguments for the preset, e.g. shift_div, mix_layout, temporal_head.",
    )
    init_from: str | None = Field(
        None,
        description="Start training from these weights: a vidtx run's Ray checkpoint (path or URI), a "
        "vidtx .pt file, a registered model (models:/name@alias), or a VideoMAE checkpoint as downloaded "
        "(a Hugging Face folder, .safetensors or .bin; an official .pth). The same classes (by name) keep "
        "its classifier; other classes get a new one. A pretraining takes a pretraining's decoder too.",
    )


class OptimizerConfig(StrictModel):
    """`train.optimizer`: the optimizer every training worker builds (`vidtx.train.optim`).

    SGD uses `momentum` and `nesterov`, AdamW `betas`; both use `lr` and `weight_decay`.
    """

    name: Literal["sgd", "adamw"] = Field("sgd", description="Optimizer.")
    lr: float = Field(0.05, gt=0, description="Peak learning rate (after warm-up).")
    momentum: float = Field(0.9, ge=0, lt=1, description="SGD momentum.")
    nesterov: bool = Field(True, description="SGD: Nesterov momentum.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    weight_decay: float = Field(1e-4, ge=0, description="Not applied to norms, biases and embeddings.")
    layer_decay: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Layer-wise LR decay for fine-tuning: the head keeps lr, block i of a depth-D trunk gets "
        "lr x decay^(D - i), the embeddings lr x decay^(D + 1) (VideoMAE: 0.75); 1: off.",
    )


class ScheduleConfig(StrictModel):
    """`train.schedule`: the per-optimizer-step LR multiplier of the training workers.

    Linear warm-up over `warmup_steps`, then cosine decay to `min_lr_ratio * lr` at `train.max_steps`.
    """

    warmup_steps: int = Field(0, ge=0, description="Linear warm-up from warmup_start_factor * lr.")
    warmup_start_factor: float = Field(0.1, gt=0, le=1, description="LR multiplier at step 0 of warm-up.")
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="Cosine decays to this fraction of lr.")


class ClusterConfig(StrictModel):
    """`train.cluster`: where the training driver runs Ray (local, connected, or a submitted job).

    Read by the train launcher only; inside a submitted job the address is cleared.
    """

    address: str | None = Field(
        None,
        description="Ray cluster: http(s)://head:8265 submits a Ray Job; host:port or 'auto' connects. "
        "RAY_ADDRESS wins; None starts a local Ray.",
    )
    runtime_env: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra Ray runtime_env for a submitted job (env_vars, pip, py_modules); "
        "working_dir is vidtx's (it carries the resolved config).",
    )
    follow_logs: bool = Field(True, description="Stream a submitted job's logs until it ends.")


class CompileConfig(StrictModel):
    """`train.compile`: torch.compile of the model inside its DeepSpeed engine (`engine.compile`).

    Every worker compiles its copy on its first step (minutes on CPUs with inductor). A backend this
    torch lacks, and every graph break, is a warning naming it; the model then runs as it can.
    """

    enabled: bool = Field(False, description="Compile the model (torch.compile through DeepSpeed).")
    backend: str = Field("inductor", description="torch.compile backend: inductor, aot_eager, eager, ...")
    mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = Field(
        "default", description="torch.compile mode."
    )


# DeepSpeed keys that typed TrainConfig fields own: setting them in `train.deepspeed` is an error.
DEEPSPEED_OWNED_KEYS = {
    "train_batch_size": "global_batch_size",
    "train_micro_batch_size_per_gpu": "micro_batch_size",
    "gradient_accumulation_steps": "global_batch_size",
    "gradient_clipping": "gradient_clipping",
    "bf16": "precision",
    "fp16": "precision",
    "optimizer": "optimizer",
    "scheduler": "schedule",
}


class TrainConfig(StrictModel):
    """`train`: Ray Train + DeepSpeed training.

    Read by the train stage: the launcher (run name, storage, workers, resources) and every worker's
    loop (steps, batches, loss, logging, checkpoints, validation); the DeepSpeed config is generated
    from it. Later stages find the training run by `run_name`.
    """

    run_name: str | None = Field(None, description="Names the training run; the same name resumes it.")
    storage_path: str = Field(
        "runs/ray",
        description="Local folder, file://, s3:// or gs:// URL for checkpoints; on a multi-node cluster, "
        "storage every node and the submitter reach (a bucket: no shared file system needed).",
    )
    num_workers: int = Field(2, ge=1, description="Ray Train workers (one per GPU on a GPU cluster).")
    use_gpu: bool = Field(False, description="One GPU per worker (CPU workers use gloo).")
    cpus_per_worker: float = Field(1.0, gt=0, description="CPUs each worker reserves.")
    placement: Placement = Field(
        "pack",
        description="How Ray places the workers on a cluster (Ray Train's placement_strategy): pack fills "
        "nodes first, spread prefers one worker per node, strict_spread requires it (waits for enough "
        "nodes), strict_pack requires one node.",
    )
    max_failures: int = Field(1, ge=0, description="Worker-group restarts from the latest checkpoint.")
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    max_steps: int = Field(100, ge=1, description="Optimizer steps in the whole run.")
    micro_batch_size: int = Field(4, ge=1, description="Clips per worker per forward pass.")
    global_batch_size: int | None = Field(
        None, ge=1, description="Clips per optimizer step over all workers (None: no accumulation)."
    )
    precision: Precision = Field("bf16", description="Mixed precision of the forward/backward (fp32: off).")
    zero_stage: Literal[0, 1, 2, 3] = Field(1, description="DeepSpeed ZeRO stage.")
    gradient_clipping: float = Field(1.0, ge=0, description="Max global grad norm (0: off).")
    activation_checkpointing: int = Field(
        0,
        ge=0,
        description="Recompute the activations of blocks 0, k, 2k, ... in the backward pass instead of "
        "keeping them: 0 off, 1 every block, k every k-th (memory for about one more forward pass).",
    )
    compile: CompileConfig = Field(default_factory=CompileConfig)
    freeze: list[str] = Field(
        default_factory=list,
        description="Parameters not trained (kept as loaded, left out of the optimizer): name patterns "
        "(fnmatch: 'blocks.0.*', 'patch_embed.*'), or 'trunk' for everything but the head (a linear probe).",
    )
    ema: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="Keep an exponential moving average of the weights with this decay (VideoMAE: 0.9999), "
        "validated beside them; eval.weights picks which are evaluated and registered (None: off).",
    )
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    label_smoothing: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="Label smoothing s: a target row is (1 - s) * the label (or label set) + s / classes.",
    )
    loss: Loss = Field(
        "cross_entropy",
        description="Single-label loss: cross_entropy, or focal (each clip's term scaled by (1 - p)^gamma, "
        "p its probability of the target: easy clips count less; Lin et al. 2017).",
    )
    focal_gamma: float = Field(2.0, ge=0, description="The focal loss's gamma (0: cross entropy).")
    class_weights: ClassWeights = Field(
        "none",
        description="Single-label loss weights per class: none, or balanced (1 / (classes x the class's "
        "share of the training stream), from the manifests' counts: rare classes weigh more).",
    )
    mixup_alpha: float = Field(0.0, ge=0, description="Mixup Beta(alpha, alpha); 0 turns it off.")
    cutmix_alpha: float = Field(
        0.0, ge=0, description="CutMix Beta(alpha, alpha), one box for all frames of a clip; 0 turns it off."
    )
    mix_switch_prob: float = Field(
        0.5, ge=0, le=1, description="With mixup and CutMix both on: the chance a batch gets CutMix."
    )
    deepspeed: dict[str, Any] = Field(
        default_factory=dict, description="Deep-merged over the generated DeepSpeed config."
    )
    log_every: int = Field(10, ge=1, description="Steps between logged metrics.")
    checkpoint_every: int = Field(50, ge=1, description="Steps between checkpoints (and one at the end).")
    keep_checkpoints: int = Field(2, ge=1, description="Latest checkpoints kept besides the best.")
    val_every: int = Field(50, ge=1, description="Steps between validation passes.")
    val_max_batches: int | None = Field(None, ge=1, description="Cap on validation batches per worker.")
    profile_steps: tuple[int, int] | None = Field(
        None,
        description="Optimizer steps [first, last] (1-based) traced by the torch profiler on rank 0, logged "
        "as MLflow artifacts under profile/ (a Perfetto/Chrome trace and the top operators).",
    )
    sample_log: Path | None = Field(
        None,
        description="Folder (on the workers' file system) where each rank appends the sample keys of every "
        "micro-batch it trains to rank-N.jsonl (lines of step and keys): the run's data order, to audit it.",
    )
    peak_tflops: float | None = Field(None, gt=0, description="Per-device peak for MFU (None: not shown).")
    seed: int = Field(0, description="Seeds the weights, the data order, dropout and batch mixing.")

    @property
    def gradient_accumulation_steps(self) -> int:
        if self.global_batch_size is None:
            return 1
        return self.global_batch_size // (self.micro_batch_size * self.num_workers)

    @field_validator("storage_path")
    @classmethod
    def _storage_is_a_location(cls, value: str) -> str:
        location(value)  # a ValueError names the scheme it does not know
        return value

    @field_validator("deepspeed")
    @classmethod
    def _no_owned_keys(cls, deepspeed: dict[str, Any]) -> dict[str, Any]:
        owned = {key: DEEPSPEED_OWNED_KEYS[key] for key in deepspeed if key in DEEPSPEED_OWNED_KEYS}
        if "stage" in deepspeed.get("zero_optimization", {}):
            owned["zero_optimization.stage"] = "zero_stage"
        if owned:
            fixes = ", ".join(f"{key} -> train.{field}" for key, field in owned.items())
            raise ValueError(f"set these through the typed fields instead: {fixes}")
        return deepspeed

    @field_validator("compile")
    @classmethod
    def _compile_below_zero_3(cls, compile: CompileConfig, info: ValidationInfo) -> CompileConfig:
        if compile.enabled and info.data.get("zero_stage") == 3:
            raise ValueError(
                "torch.compile of a ZeRO-3 engine is not supported here: dynamo does not trace through "
                "ZeRO-3's parameter gathers (its first step did not end); use zero_stage <= 2, or compile off"
            )
        return compile

    @field_validator("ema")
    @classmethod
    def _ema_below_zero_3(cls, ema: float | None, info: ValidationInfo) -> float | None:
        if ema is not None and info.data.get("zero_stage") == 3:
            raise ValueError(
                "a weight average needs whole parameters on each rank, which ZeRO-3 partitions: use "
                "zero_stage <= 2, or ema off"
            )
        return ema

    @field_validator("profile_steps")
    @classmethod
    def _steps_in_the_run(cls, steps: tuple[int, int] | None, info: ValidationInfo) -> tuple[int, int] | None:
        max_steps = info.data.get("max_steps")
        if steps is not None and not 1 <= steps[0] <= steps[1] <= (max_steps or steps[1]):
            raise ValueError(
                f"{list(steps)}: must be [first, last] with 1 <= first <= last <= max_steps ({max_steps})"
            )
        return steps

    @field_validator("global_batch_size")
    @classmethod
    def _divisible_batch(cls, global_batch_size: int | None, info: ValidationInfo) -> int | None:
        micro, workers = info.data.get("micro_batch_size"), info.data.get("num_workers")
        if global_batch_size is not None and micro and workers and global_batch_size % (micro * workers):
            raise ValueError(
                f"{global_batch_size} is not a multiple of micro_batch_size x num_workers ({micro} x {workers})"
            )
        return global_batch_size
