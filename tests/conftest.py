"""Shared test set-up: the same environment defaults as the CLI and flows."""

from vidtx.env import apply_defaults

apply_defaults()
