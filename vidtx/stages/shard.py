"""The shard stage: a video dataset (generated first when a `synth` section is given) into WebDataset
shards and one manifest per split.

The steps run in this order here and nowhere else: synthesise (unless the dataset is there), plan
(which video in which tar; what under the root is not sharded goes to `ignored.jsonl`), write every
shard (`shard.executor`: a process pool or Ray tasks, `vidtx.shard.job`), finalize each split. A
caller may run a step its own way (the `shard-dataset` flow runs each as a Prefect task, one per shard
for the writes) through `ShardSteps`; `vidtx shard` runs them as they are.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from vidtx.config import ShardConfig, SynthConfig
from vidtx.locations import Location
from vidtx.manifest import Manifest, manifest_path
from vidtx.results import ShardedSplit
from vidtx.shard.job import write_shards
from vidtx.shard.outcome import shard_summary, write_ignored
from vidtx.shard.plan import ShardSpec, plan_shards, read_dataset
from vidtx.shard.synthetic import generate_dataset
from vidtx.shard.writer import ShardResult, finalize_split, split_line

log = logging.getLogger(__name__)


def synthesize(synth: SynthConfig) -> str:
    """Generate the synthetic dataset unless it is there already (generation is deterministic); what
    was done, in one line."""
    annotations = synth.output / "annotations.csv"
    if annotations.is_file():
        return f"{annotations} is there already: the synthetic dataset is not generated again"
    return f"generated the synthetic dataset: {generate_dataset(synth)}"


def plan_dataset(cfg: ShardConfig) -> list[ShardSpec]:
    """Read the dataset, plan its shards and write `ignored.jsonl` (what under the root is not sharded)."""
    source = read_dataset(cfg)
    specs = plan_shards(cfg, source)
    write_ignored(cfg.output, source)
    return specs


def plan_line(cfg: ShardConfig, specs: list[ShardSpec]) -> str:
    per_split = Counter(spec.split for spec in specs)
    planned = ", ".join(f"{count} of {split}" for split, count in per_split.items())
    return f"planned {len(specs)} shards ({planned}) into {cfg.output}"


def finalize_line(cfg: ShardConfig, manifest: Manifest) -> str:
    return f"{split_line(manifest)}; manifest {manifest_path(cfg.output, manifest.split)}"


@dataclass(frozen=True)
class ShardSteps:
    """How each step runs: the library's own functions, or a caller's around them."""

    synthesize: Callable[[SynthConfig], str] = synthesize
    plan: Callable[[ShardConfig], list[ShardSpec]] = plan_dataset
    write: Callable[[list[ShardSpec], ShardConfig], list[ShardResult]] = write_shards
    finalize: Callable[[ShardConfig, str, list[ShardResult]], Manifest] = finalize_split


@dataclass(frozen=True)
class ShardOutcome:
    """What the stage wrote: each split's manifest, and what happened to each shard."""

    output: Location
    manifests: dict[str, Manifest]
    results: list[ShardResult]

    def reuse_note(self) -> str:
        reused = sum(result.reused for result in self.results)
        return f"reused {reused} of {len(self.results)} shards (already complete from the same plan)"

    def splits(self) -> dict[str, ShardedSplit]:
        return {
            split: ShardedSplit(
                manifest=str(manifest_path(self.output, split)),
                content_hash=manifest.content_hash,
                samples=manifest.num_samples,
                rejects=len(manifest.rejects),
            )
            for split, manifest in self.manifests.items()
        }

    def summary(self) -> str:
        """`vidtx shard`'s lines: each split and its manifest, then what was found, sharded, rejected
        and ignored."""
        lines = [
            f"{manifest.summary()} -> {manifest_path(self.output, split)}"
            for split, manifest in self.manifests.items()
        ]
        return "\n".join([*lines, shard_summary(self.output, self.manifests)])


def shard_dataset(
    cfg: ShardConfig, synth: SynthConfig | None = None, steps: ShardSteps = ShardSteps()
) -> ShardOutcome:
    """Synthesise (with `synth`), plan, write every shard and finalize every split. SIGTERM stops the
    writes as `vidtx.processes.TerminatedError` with every child (or task) stopped; a re-run
    resumes, skipping the shards already complete from the same plan."""
    if synth is not None:
        log.info("%s", steps.synthesize(synth))
    specs = steps.plan(cfg)
    log.info("%s", plan_line(cfg, specs))
    results = steps.write(specs, cfg)
    outcome = ShardOutcome(
        cfg.output,
        {split: steps.finalize(cfg, split, results) for split in dict.fromkeys(spec.split for spec in specs)},
        results,
    )
    log.info("%s: %s", cfg.output, outcome.reuse_note())
    return outcome
