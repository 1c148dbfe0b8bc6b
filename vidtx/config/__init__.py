"""Configuration: the pydantic schema (`base`, `data`, `training`, `schema`) and reading it from
YAML files and overrides (`loading`). Imports nothing of vidtx outside this package."""

from vidtx.config.base import ConfigError, StrictModel
from vidtx.config.data import (
    CropMode,
    DataConfig,
    DatasetFormat,
    RandAugmentConfig,
    ReencodeConfig,
    SamplingMode,
    ShardConfig,
    SourceConfig,
    SynthConfig,
)
from vidtx.config.export import ExportConfig
from vidtx.config.loading import (
    apply_overrides,
    deep_merge,
    dump_config,
    load_config,
    parse_override,
    validate_config,
)
from vidtx.config.pretrain import Objective, PretrainConfig
from vidtx.config.schema import (
    Ensemble,
    EvalConfig,
    PipelineConfig,
    PredictConfig,
    RegistryConfig,
    StorageConfig,
    TrackingConfig,
)
from vidtx.config.sweep import Distribution, SchedulerConfig, SweepConfig
from vidtx.config.training import (
    DEEPSPEED_OWNED_KEYS,
    AttentionImpl,
    ClusterConfig,
    CompileConfig,
    ModelConfig,
    OptimizerConfig,
    Precision,
    ScheduleConfig,
    TrainConfig,
)

__all__ = [
    "DEEPSPEED_OWNED_KEYS",
    "AttentionImpl",
    "ClusterConfig",
    "CompileConfig",
    "ConfigError",
    "CropMode",
    "DataConfig",
    "DatasetFormat",
    "Distribution",
    "Ensemble",
    "EvalConfig",
    "ExportConfig",
    "ModelConfig",
    "Objective",
    "OptimizerConfig",
    "PipelineConfig",
    "Precision",
    "PredictConfig",
    "PretrainConfig",
    "RandAugmentConfig",
    "ReencodeConfig",
    "RegistryConfig",
    "SamplingMode",
    "ScheduleConfig",
    "SchedulerConfig",
    "ShardConfig",
    "SourceConfig",
    "StorageConfig",
    "StrictModel",
    "SweepConfig",
    "SynthConfig",
    "TrackingConfig",
    "TrainConfig",
    "apply_overrides",
    "deep_merge",
    "dump_config",
    "load_config",
    "parse_override",
    "validate_config",
]
