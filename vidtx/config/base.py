"""The base of every config section, and the error that names a field."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict


class ConfigError(ValueError):
    """A configuration could not be loaded; the message names the source and the field."""


class StrictModel(BaseModel):
    """Base for every config section: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    def with_absolute_paths(self) -> Self:
        """A copy whose relative paths are absolute against the current directory, for processes
        that run elsewhere: a Ray worker starts in its own session folder, not the driver's."""
        return self.model_validate(_absolute_paths(self.model_dump()))


def _absolute_paths(value: Any) -> Any:
    if isinstance(value, Path):
        return value.expanduser().absolute()
    if isinstance(value, dict):
        return {key: _absolute_paths(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_absolute_paths(item) for item in value]
    return value
