"""Prefect flows: thin orchestration over the `vidtx` library."""

from vidtx.env import apply_defaults

apply_defaults()
