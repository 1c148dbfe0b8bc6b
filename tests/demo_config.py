"""The demo pipeline config shrunk for tests that run whole flows (4 classes of 32x32 videos, 6 steps),
for tests/test_flows.py and tests/test_ui.py.

Imported as `from demo_config import ...` (tests/ is on sys.path under pytest, see media.py).
"""

from __future__ import annotations

from pathlib import Path

from vidtx.config import PipelineConfig, dump_config, load_config

ROOT = Path(__file__).resolve().parent.parent


def shrunk_demo_config(workdir: Path, *overrides: str) -> PipelineConfig:
    """configs/experiments/demo.yaml with every file under `workdir`, sized to run in seconds, then
    `overrides`."""
    return load_config(
        ROOT / "configs/experiments/demo.yaml",
        [
            f"workdir={workdir}",
            f"synth.output={workdir / 'videos'}",
            "synth.classes=[moving_left, moving_right, growing, shrinking]",
            "synth.videos_per_class={train: 6, val: 3, test: 3}",
            "synth.num_frames=8",
            "synth.size=32",
            f"shard.source={workdir / 'videos/annotations.csv'}",
            f"shard.output={workdir / 'shards'}",
            "shard.max_samples_per_shard=8",
            "data.num_frames=4",
            "data.short_side=32",
            "data.crop_size=32",
            "data.num_workers=0",
            f"train.storage_path={workdir / 'ray'}",
            "train.max_steps=6",
            "train.micro_batch_size=4",
            "train.checkpoint_every=3",
            "eval.batch_size=4",
            "registry.min_top1=0",  # 6 steps learn nothing: the aliases' plumbing is what is tested
            *overrides,
        ],
    )


def config_file(config: PipelineConfig, folder: Path) -> Path:
    """`config` written to `folder/pipeline.yaml`, what a flow's run form names (`settings.config`)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pipeline.yaml"
    path.write_text(dump_config(config))
    return path
