"""The demo config: the default parameters of every flow and deployment."""

from __future__ import annotations

from pathlib import Path

from vidtx.config import load_config

DEMO_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "experiments" / "demo.yaml"
DEMO = load_config(DEMO_CONFIG)
