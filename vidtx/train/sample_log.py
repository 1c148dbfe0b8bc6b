"""`train.sample_log`: which samples each step of a run trained on, rank by rank.

Each rank appends a line per micro-batch to `rank-<R>.jsonl` in the folder: `{"step": s, "keys": [...]}`,
`s` being the optimizer step the micro-batch is for. A run that is killed and resumed appends on: the
steps it trains again after its checkpoint appear twice, the later line being the one that counts.
"""

from __future__ import annotations

import json
from pathlib import Path


class SampleLog:
    def __init__(self, folder: Path | None, rank: int) -> None:
        self.file = None
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            self.file = (folder / f"rank-{rank}.jsonl").open("a", buffering=1)  # a line at a time

    def write(self, step: int, keys: list[str]) -> None:
        if self.file is not None:
            self.file.write(json.dumps({"step": step, "keys": keys}) + "\n")

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
