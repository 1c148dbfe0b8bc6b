"""torch.compile of a training engine, and what the compiler says about the model.

DeepSpeed compiles the module it wraps (`engine.compile`, which calls `nn.Module.compile`: the state
dict keeps its names, so checkpoints of compiled and eager runs are the same). Nothing here falls
back in silence: a backend this torch does not have leaves the model eager with a warning that names
the backends it has, and every graph break (where dynamo hands a piece of the model back to Python)
is a warning naming its reason, once, after the first step has compiled.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from vidtx.config import CompileConfig

log = logging.getLogger(__name__)


def compile_engine(engine: Any, cfg: CompileConfig) -> bool:
    """Compile `engine`'s model with `cfg` (compiled on its first forward); False, with a warning,
    when the backend is not one this torch has."""
    backends = torch._dynamo.list_backends(exclude_tags=())
    if cfg.backend not in backends:
        log.warning(
            "train.compile.backend %r is not a torch.compile backend here (it has %s): the model runs eager",
            cfg.backend,
            ", ".join(backends),
        )
        return False
    torch._dynamo.utils.counters["graph_break"].clear()
    engine.compile(backend=cfg.backend, compile_kwargs={"mode": cfg.mode} if cfg.mode else {})
    log.info(
        "the model is compiled with torch.compile (backend %s, mode %s)", cfg.backend, cfg.mode or "default"
    )
    return True


def graph_breaks() -> dict[str, int]:
    """Reason -> count of the graph breaks dynamo has met in this process since `compile_engine`."""
    return dict(torch._dynamo.utils.counters["graph_break"])


def warn_about_graph_breaks() -> dict[str, int]:
    """One warning naming every graph break met so far (call it once the first step has compiled)."""
    breaks = graph_breaks()
    if breaks:
        reasons = "; ".join(f"{reason} (x{count})" for reason, count in breaks.items())
        log.warning("torch.compile: the model's graph breaks %d times: %s", sum(breaks.values()), reasons)
    return breaks
