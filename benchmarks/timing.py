"""Measuring on a noisy machine: interleaved repeats, medians, and peak memory.

Time. Other jobs share the machine, so no single timing means much. Every candidate is warmed up,
then measured in rounds; each round runs every candidate once, in an order rotated by one each round,
so that a burst of load from elsewhere falls on all candidates alike. Results are medians with their
spread, and benchmarks report ratios between candidates of the same run (`round_ratios`: per round,
then the median).

Peak memory: the most bytes of tensors allocated by a call that are alive at the same time.

* CUDA: `torch.cuda.max_memory_allocated` after `reset_peak_memory_stats`, less what was allocated
  when the call started.
* CPU: torch's profiler with `profile_memory=True` records every allocation and free of torch's CPU
  allocator in order; the running sum of their sizes peaks at the answer (frees of tensors made
  before the call are left out). This counts tensors only (activations, gradients, kernel
  workspaces): RSS deltas would mix in the allocator's cached pages and Python objects, and
  tracemalloc does not see torch's allocations at all.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile


@dataclass(frozen=True)
class Samples:
    """Repeated measurements of one quantity (seconds, or a rate)."""

    values: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def quartiles(self) -> tuple[float, float]:
        """The 25th and 75th percentiles (the middle half of the repeats lies between them)."""
        low, _, high = statistics.quantiles(self.values, n=4, method="inclusive")
        return low, high

    @property
    def spread(self) -> float:
        """(max - min) / median: how much the repeats disagree."""
        return (max(self.values) - min(self.values)) / self.median if self.median else 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "median": self.median,
            "min": min(self.values),
            "max": max(self.values),
            "values": self.values,
        }


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """Run the body with `count` intra-op threads. On a machine shared with other jobs one thread per
    measurement is the stable choice: OpenMP regions wait for their slowest thread, so a thread whose
    core another process holds stalls the whole computation."""
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved(measurements: Mapping[str, Callable[[], float]], rounds: int) -> dict[str, Samples]:
    """Call every measurement once per round, rotating the order each round; each call returns its
    own figure (a duration, a rate)."""
    names = list(measurements)
    values: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            values[name].append(measurements[name]())
    return {name: Samples(tuple(samples)) for name, samples in values.items()}


def round_ratios(candidate: Samples, baseline: Samples) -> Samples:
    """Round by round, `candidate` / `baseline` of two candidates measured in the same interleaved
    rounds: load from elsewhere that slows a whole round slows both and cancels in the ratio, which is
    why a ratio of two candidates is best read as the median of these (not as a ratio of medians)."""
    return Samples(tuple(c / b for c, b in zip(candidate.values, baseline.values, strict=True)))


def time_interleaved(
    candidates: Mapping[str, Callable[[], object]],
    *,
    warmup: int = 1,
    repeats: int = 5,
    device: torch.device | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Samples]:
    """Seconds per call of every candidate: `warmup` untimed calls each, then `repeats` interleaved
    rounds, read from `clock` (wall time by default; `time.thread_time` counts only the CPU time of
    the calling thread, see `torch_threads`)."""
    device = device or torch.device("cpu")
    for candidate in candidates.values():
        for _ in range(warmup):
            candidate()
    synchronize(device)

    def timed(candidate: Callable[[], object]) -> Callable[[], float]:
        def measure() -> float:
            start = clock()
            candidate()
            synchronize(device)
            return clock() - start

        return measure

    return interleaved({name: timed(candidate) for name, candidate in candidates.items()}, repeats)


def peak_memory(fn: Callable[[], object], device: torch.device | None = None) -> int:
    """Peak bytes of tensors allocated during `fn()` above those alive when it started."""
    device = device or torch.device("cpu")
    if device.type == "cuda":
        synchronize(device)
        start = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - start
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        fn()
    # Allocator events are the Allocation nodes of the profiler's event tree (size < 0: a free).
    events, stack = [], list(profiler.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.tag == torch._C._profiler._EventType.Allocation and node.extra_fields.device.type == "cpu":
            events.append((node.start_time_ns, node.extra_fields.alloc_size, node.extra_fields.ptr))
    allocated: set[int] = set()  # frees of blocks that were alive before `fn` started do not count
    live = peak = 0
    for _, size, pointer in sorted(events):
        if size > 0:
            allocated.add(pointer)
        elif pointer not in allocated:
            continue
        else:
            allocated.discard(pointer)
        live += size
        peak = max(peak, live)
    return peak
