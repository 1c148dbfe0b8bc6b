"""What a person sees on the console, and what goes to the log file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

LOG_TWICE_AND_CHATTER = """
import logging, sys
from pathlib import Path
logging.getLogger().addHandler(logging.StreamHandler(sys.stderr))  # as Prefect's logging setup does
from vidtx.log import setup_logging
setup_logging(sys.argv[2], log_file=Path(sys.argv[1]))
logging.getLogger("vidtx.stage").info("stage one done")
logging.getLogger("httpx").info("HTTP Request: POST http://127.0.0.1/api/logs/")
"""


def run(log_file: Path, level: str) -> str:
    command = [sys.executable, "-c", LOG_TWICE_AND_CHATTER, str(log_file), level]
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=60).stderr


def test_each_record_is_printed_once_http_chatter_only_with_debug_and_everything_goes_to_the_file(
    tmp_path: Path,
) -> None:
    console = run(tmp_path / "logs" / "run.log", "INFO")
    assert console.count("stage one done") == 1  # another console handler on the root is replaced
    assert "HTTP Request" not in console
    assert "vidtx.stage: stage one done" in (tmp_path / "logs" / "run.log").read_text()
    assert "HTTP Request" in run(tmp_path / "debug.log", "DEBUG")
