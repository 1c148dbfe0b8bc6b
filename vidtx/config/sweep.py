"""`sweep`: a hyperparameter search over the config, run by Ray Tune (`vidtx.stages.sweep`).

The space names config keys as `--set` does (`train.optimizer.lr`, `model.options.shift_div`), each
with one distribution. The schema checks every key and every value a distribution can give against
the field it names before anything starts (`PipelineConfig`'s check of `sweep`): a trial never
fails on a value its field refuses.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from vidtx.config.base import StrictModel
from vidtx.config.pretrain import Objective

Value = int | float | str | bool
KINDS = ("loguniform", "uniform", "randint", "choice", "grid")


class Distribution(StrictModel):
    """The values one key of the space takes: exactly one of these."""

    loguniform: tuple[float, float] | None = Field(None, description="[low, high], sampled on a log scale.")
    uniform: tuple[float, float] | None = Field(None, description="[low, high].")
    randint: tuple[int, int] | None = Field(None, description="[low, high], both included.")
    choice: list[Value] | None = Field(None, min_length=1, description="One of these at random.")
    grid: list[Value] | None = Field(None, min_length=1, description="Each of these, in order.")

    @model_validator(mode="after")
    def _one_kind(self) -> Distribution:
        given = [kind for kind in KINDS if getattr(self, kind) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(KINDS)} (got {', '.join(given) or 'none'})")
        if self.kind in ("loguniform", "uniform", "randint"):
            low, high = getattr(self, self.kind)
            if not low < high:
                raise ValueError(f"{self.kind}: [low, high] with low < high, got [{low}, {high}]")
            if self.kind == "loguniform" and low <= 0:
                raise ValueError(f"loguniform: low must be above 0, got {low}")
        return self

    @model_serializer(mode="wrap")
    def _given_kind_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """As written: `{loguniform: [1.0e-5, 1.0e-3]}`, not every kind with its None."""
        return {kind: values for kind, values in handler(self).items() if values is not None}

    @property
    def kind(self) -> str:
        return next(kind for kind in KINDS if getattr(self, kind) is not None)

    @property
    def values(self) -> Any:
        return getattr(self, self.kind)

    def candidates(self) -> list[Value]:
        """The values to check against the key's field: each of a list; both ends of a range, and of a
        continuous one a value between them that is no whole number (an integer setting refuses it)."""
        if self.kind not in ("loguniform", "uniform"):
            return list(self.values)
        low, high = self.values
        return [low, high, low + (high - low) / math.pi]


class SchedulerConfig(StrictModel):
    """`sweep.scheduler`: which trials stop early. A trial's validation reaches the scheduler at each
    of its checkpoints (`train.checkpoint_every`)."""

    name: Literal["asha", "none"] = Field(
        "asha", description="asha: Ray Tune's asynchronous successive halving; none: every trial runs out."
    )
    grace_steps: int = Field(20, ge=1, description="Steps every trial trains before it may be stopped.")
    reduction_factor: float = Field(
        2.0, gt=1, description="At each rung (grace_steps x factor^k) about 1 trial in this many goes on."
    )


class SweepConfig(StrictModel):
    """`sweep`: a search over this config with Ray Tune, each trial a Ray Train run (`vidtx sweep`).

    Read by the sweep stage: the space, how many trials and how many at once, what is compared, and
    which trials stop early. Trials train in `train.storage_path` as runs named SWEEP-TRIAL (the
    sweep's name, the trial's id).
    """

    name: str | None = Field(
        None,
        description="Names the sweep (its Tune experiment in train.storage_path, its MLflow parent run); "
        "the same name resumes it. None: the config's name, -sweep- and the date and time.",
    )
    space: dict[str, Distribution] = Field(
        default_factory=dict,
        description="Config keys to search, each with one distribution.",
        examples=[
            {
                "train.optimizer.lr": {"loguniform": [1.0e-5, 1.0e-3]},
                "model.options.shift_div": {"choice": [4, 8]},
            }
        ],
    )
    num_trials: int = Field(
        4, ge=1, description="Trials sampled from the space (with a grid: per grid point)."
    )
    max_concurrent: int | None = Field(
        None, ge=1, description="Trials at once (None: as many as the Ray cluster fits)."
    )
    objective: Objective = Field(
        "classification",
        description="What every trial learns: classification (the best trial evaluated, then registered "
        "under registry) or masked_autoencoding (pretraining, compared by val_loss; the best trial's "
        "encoder registered under pretrain).",
    )
    metric: Literal["val_top1", "val_map", "val_loss"] = Field(
        "val_top1", description="Validation metric compared (val_map: a multi-label model's mAP)."
    )
    mode: Literal["max", "min"] = Field("max", description="Whether a higher or a lower `metric` is better.")
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    seed: int | None = Field(0, description="Seeds the sampling of the space (None: unseeded).")

    @model_validator(mode="after")
    def _pretraining_compares_its_loss(self) -> SweepConfig:
        if self.objective == "masked_autoencoding" and (self.metric, self.mode) != ("val_loss", "min"):
            raise ValueError(
                f"metric {self.metric} ({self.mode}): a pretraining reports only its reconstruction loss; "
                "set sweep.metric=val_loss and sweep.mode=min"
            )
        return self


def with_values(data: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the raw config `data` with the dotted keys of `values` set (sections made as needed)."""
    result = copy.deepcopy(dict(data))
    for key, value in values.items():
        *parents, name = key.split(".")
        node = result
        for parent in parents:
            child = node.get(parent)
            node = node.setdefault(parent, {}) if child is None else child
            if not isinstance(node, dict):
                raise ValueError(f"{parent} is a value, not a section")
        node[name] = value
    return result
