"""The benchmark machinery: interleaved timing, peak memory, results files, the runner (`make bench`),
and the GPU script's CPU smoke mode. (Speed itself is measured by `make bench`, never in tests.)"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

# benchmarks/ is not part of the installed package: import it from the checkout whatever the working
# directory (`python -m pytest` from the root would find it anyway, `.venv/bin/pytest` would not).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import data_loading, demo_augmentation, gpu, run, temporal_reasoning
from benchmarks.results import BenchmarkResult, Table, fmt, read_result, write_index, write_result
from benchmarks.seed_spread import paired
from benchmarks.timing import (
    Samples,
    interleaved,
    peak_memory,
    round_ratios,
    time_interleaved,
    torch_threads,
)

MB = 1_000_000


def test_interleaved_rotates_the_order_every_round() -> None:
    calls: list[str] = []
    measurements = {name: (lambda name=name: calls.append(name) or float(len(calls))) for name in "abc"}
    samples = interleaved(measurements, rounds=3)
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert samples["a"].values == (1.0, 6.0, 8.0)


def test_time_interleaved_warms_up_and_times_each_candidate() -> None:
    calls = {"fast": 0, "slow": 0}

    def candidate(name: str, seconds: float) -> None:
        calls[name] += 1
        time.sleep(seconds)

    timings = time_interleaved(
        {"fast": lambda: candidate("fast", 0.001), "slow": lambda: candidate("slow", 0.02)},
        warmup=2,
        repeats=3,
    )
    assert calls == {"fast": 5, "slow": 5}
    assert len(timings["slow"].values) == 3
    assert timings["slow"].median > 0.02 > timings["fast"].median


def test_time_interleaved_reads_the_given_clock() -> None:
    """attention_scaling times in the thread's CPU time: a sleep takes wall time but no CPU time."""
    wall = time_interleaved({"sleep": lambda: time.sleep(0.05)}, warmup=0, repeats=2)
    cpu = time_interleaved({"sleep": lambda: time.sleep(0.05)}, warmup=0, repeats=2, clock=time.thread_time)
    assert wall["sleep"].median >= 0.05 > 0.01 > cpu["sleep"].median


def test_round_ratios_pair_the_rounds() -> None:
    ratios = round_ratios(Samples((2.0, 4.0, 3.0)), Samples((1.0, 4.0, 2.0)))
    assert ratios.values == (2.0, 1.0, 1.5)
    assert ratios.median == 1.5
    assert Samples((1.0, 2.0, 3.0, 4.0, 5.0)).quartiles == (2.0, 4.0)


def test_samples_statistics() -> None:
    samples = Samples((1.0, 4.0, 2.0))
    assert samples.median == 2.0
    assert samples.spread == pytest.approx(1.5)
    assert samples.to_json() == {"median": 2.0, "min": 1.0, "max": 4.0, "values": (1.0, 4.0, 2.0)}


def _runs(label: str, top1_by_seed: dict[int, float]) -> list[dict]:
    return [{"label": label, "seed": seed, "curve": [{"val_top1": v}]} for seed, v in top1_by_seed.items()]


def test_paired_difference_compares_the_same_seeds_and_says_what_its_interval_shows() -> None:
    base = _runs("b", {0: 0.50, 1: 0.20, 2: 0.80, 3: 0.40})
    shifted = _runs("a", {3: 0.52, 0: 0.61, 1: 0.31, 2: 0.90})  # +0.10 to +0.12 on every seed
    difference = paired(shifted, base, "val_top1")
    assert sorted(difference.differences) == pytest.approx([0.10, 0.11, 0.11, 0.12])
    low, high = difference.interval
    assert 0 < low < difference.mean < high  # the seeds' spread (0.2-0.8) cancels in the pairs
    assert difference.verdict(margin=0.05) == "differ"
    assert "4 seeds" in str(difference)
    close = paired(_runs("a", {0: 0.51, 1: 0.19, 2: 0.80, 3: 0.40}), base, "val_top1")
    assert close.verdict(margin=0.05) == "tie"
    noisy = paired(_runs("a", {0: 0.80, 1: 0.10, 2: 0.60, 3: 0.40}), base, "val_top1")
    assert noisy.verdict(margin=0.05) == "unsettled"
    assert paired(_runs("a", {0: 0.6}), base, "val_top1").verdict(margin=0.05) == "unsettled"


def test_peak_memory_counts_live_tensors_at_the_peak() -> None:
    def allocate() -> None:
        first = torch.empty(4 * MB, dtype=torch.uint8)
        second = torch.empty(2 * MB, dtype=torch.uint8)
        del first, second
        torch.empty(1 * MB, dtype=torch.uint8)

    assert 6 * MB <= peak_memory(allocate) < 6.1 * MB


def test_peak_memory_ignores_frees_of_tensors_made_before_the_call() -> None:
    held = [torch.empty(8 * MB, dtype=torch.uint8)]

    def release_then_allocate() -> None:
        held.clear()
        torch.empty(3 * MB, dtype=torch.uint8)

    assert 3 * MB <= peak_memory(release_then_allocate) < 3.1 * MB


def test_torch_threads_is_restored() -> None:
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_fmt_keeps_significant_digits() -> None:
    assert [fmt(v) for v in (0.0123456, 1.23456, 123.456, 12345.6, 0.0)] == [
        "0.0123",
        "1.23",
        "123",
        "12,346",
        "0",
    ]
    assert fmt(1e-5) == "1e-05"


def sample_result(name: str, quick: bool = False) -> BenchmarkResult:
    return BenchmarkResult(
        name=name,
        title=f"Title of {name}",
        summary="What was compared.",
        inputs={"size": 3},
        tables=[Table("Timings", ["case", "ms"], [["a", "1.00"], ["b", "2.00"]])],
        raw={"a": Samples((0.001, 0.002))},
        notes=["a is faster"],
        quick=quick,
    )


def test_write_result_writes_json_and_markdown(tmp_path: Path) -> None:
    json_path, md_path = write_result(sample_result("example"), tmp_path)
    document = json.loads(json_path.read_text())
    assert document["raw"]["a"]["median"] == pytest.approx(0.0015)
    assert document["inputs"] == {"size": 3}
    for key in ("date", "torch", "cpu_count", "load_average_1_5_15_min", "git_commit"):
        assert key in document["environment"]
    markdown = md_path.read_text()
    assert markdown.startswith("## Title of example\n")
    assert "| case | ms |\n|---|---|\n| a | 1.00 |" in markdown
    assert "- a is faster" in markdown
    assert f"torch {torch.__version__}" in markdown
    assert read_result("example", tmp_path)["title"] == "Title of example"
    assert read_result("missing", tmp_path) is None


def test_write_index_gathers_tables_in_order(tmp_path: Path) -> None:
    for name in ("zeta", "beta", "alpha"):
        write_result(sample_result(name, quick=name == "beta"), tmp_path)
    index = write_index(tmp_path, ["zeta", "absent"], ["# Results"]).read_text()
    assert index.startswith("# Results\n")
    positions = [index.index(f"## Title of {name}") for name in ("zeta", "alpha", "beta")]
    assert positions == sorted(positions)
    assert "## Title of beta (quick run)" in index


def test_demo_augmentation_trains_every_crop_and_frame_setting_on_the_demo_data(tmp_path: Path) -> None:
    """The demo's own config drives it (model options, data, batch, learning rate); two steps on a
    dataset of two videos per class, to check the wiring, not the figures."""
    config = demo_augmentation.load_config(
        demo_augmentation.DEMO_CONFIG,
        ["synth.videos_per_class.train=2", "synth.videos_per_class.val=1", "synth.videos_per_class.test=1"],
    )
    budget = dataclasses.replace(demo_augmentation.demo_budget(config, steps=2), eval_every=1)
    assert (budget.batch_size, budget.lr) == (16, config.train.optimizer.lr)
    chosen = [demo_augmentation.Variant(crop, "random", 0) for crop in demo_augmentation.CROPS]
    results = demo_augmentation.measure(config, budget, chosen, tmp_path)
    assert [r["label"] for r in results] == [v.label for v in chosen]
    for result in results:
        assert [point["step"] for point in result["curve"]] == [1, 2]
        assert 0 <= result["curve"][-1]["val_top1"] <= 1
    report = demo_augmentation.report(results, config, budget, quick=True, output_dir=tmp_path)
    assert len(report.tables[0].rows) == len(chosen)
    assert (tmp_path / "demo_augmentation.png").stat().st_size > 0


def test_every_registered_benchmark_has_a_run_function() -> None:
    for name in run.BENCHMARKS:
        module = importlib.import_module(f"benchmarks.{name}")
        parameters = list(inspect.signature(module.run).parameters.values())
        assert [p.name for p in parameters[:2]] == ["output_dir", "quick"]  # what the runner passes
        assert all(p.default is not p.empty for p in parameters[2:]), name


def test_runner_rejects_unknown_names(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run.main(["attention_scaling", "nope"])
    assert exit_info.value.code == 2
    assert "unknown benchmark(s) nope" in capsys.readouterr().err


def test_the_runner_is_a_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "nope"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert "unknown benchmark(s) nope" in result.stderr


def test_steady_rate_leaves_out_the_batches_before_skip() -> None:
    def batches():  # the first batch is slow (worker start-up), then 4 clips every 20 ms
        time.sleep(0.3)
        yield torch.zeros(4)
        for _ in range(5):
            time.sleep(0.02)
            yield torch.zeros(4)

    rate = data_loading.steady_rate(batches(), count=6, skip=1)
    assert 50 < rate <= 200  # 20 clips in 5 x 20 ms; the first 300 ms are not counted


def test_gpu_demand_uses_a_committed_gpu_result_when_there_is_one(tmp_path: Path) -> None:
    stated, source = data_loading.gpu_demand(8, tmp_path)
    assert "55% MFU" in source
    assert 600 < stated < 700  # 0.55 x 989 TFLOP/s over ~0.84 TFLOP per X-ViT B/16 8x224 clip
    measured = sample_result("gpu")
    measured.raw = {"training": {"xvit_b16_8x224": {"clips_per_second": 321.0}}}
    write_result(measured, tmp_path)
    rate, source = data_loading.gpu_demand(8, tmp_path)
    assert rate == 321.0
    assert source.startswith("measured")


def test_gpu_script_smoke_mode_runs_on_the_cpu(tmp_path: Path) -> None:
    assert gpu.main(["--smoke", "--output", str(tmp_path)]) == 0
    document = json.loads((tmp_path / "gpu.json").read_text())
    assert document["quick"] is True
    for label, measured in document["raw"]["training"].items():
        assert measured["clips_per_second"] > 0, label
        assert measured["micro_batches"]["1"]["peak_bytes"] > 0
    assert "step_seconds" in document["raw"]["sdpa_backends"]["flash"]
    assert "step_seconds" in document["raw"]["sdpa_backends"]["math (vidtx)"]
    (knobs,) = document["raw"]["knobs"].values()  # the trainer's knobs on the first preset
    assert (
        knobs["checkpointing"]["activation_bytes"]["on"] < knobs["checkpointing"]["activation_bytes"]["off"]
    )
    assert knobs["compile"]["step_seconds"]["compiled"]["median"] > 0
    assert 0 < knobs["costs"]["ema_fraction"] < 1
    assert "smoke test" in (tmp_path / "gpu.md").read_text()


def test_the_science_check_runs_end_to_end_on_a_tiny_budget(tmp_path: Path) -> None:
    """The science check itself (X-ViT reads the frame order that spatial-only attention cannot) is
    `make bench`'s (`benchmarks/temporal_reasoning.py`, minutes of training); here its whole path runs
    in seconds: the dataset generated and decoded, both quick variants trained, the report and figure."""
    tiny = temporal_reasoning.Budget(temporal_reasoning.CLASSES[:2], 2, 2, 32, 24, 4, 4, 2, warmup_steps=1)
    result = temporal_reasoning.run(tmp_path, quick=True, budget=tiny)
    runs = result.raw["results"]
    assert [run["label"] for run in runs] == ["spatial-only + averaging", "mix 0.25, attention head"]
    assert all([point["step"] for point in run["curve"]] == [2, 4] for run in runs)
    assert all(0 <= run["curve"][-1]["val_direction"] <= 1 for run in runs)
    assert (tmp_path / "temporal_reasoning.png").stat().st_size > 0


def test_the_science_check_fails_make_bench_on_runs_that_contradict_it() -> None:
    def run(label: str, direction: float, options: dict) -> dict:
        return {"label": label, "seed": 0, "options": options, "curve": [{"val_direction": direction}]}

    xvit = {"shift_div": temporal_reasoning.MIXED_FRACTIONS[0.25], "temporal_head": "attention"}
    unmixed = {"shift_div": temporal_reasoning.MIXED_FRACTIONS[0.0], "temporal_head": "attention"}
    expected = [run("spatial-only + averaging", 0.5, {}), run("mix 0.25, attention head", 0.93, xvit),
                run("mix 0, attention head", 0.5, unmixed)]  # fmt: skip
    assert temporal_reasoning.science_check(expected) == []
    contradicting = [run("spatial-only + averaging", 0.8, {}), run("mix 0.25, attention head", 0.55, xvit)]
    assert temporal_reasoning.science_check(contradicting) == [
        "spatial-only + averaging (seed 0) tells direction 0.800 > 0.6",
        "mix 0.25, attention head (seed 0) tells direction 0.550 < 0.7",
    ]


def test_the_science_check_reuses_earlier_runs_and_trains_only_what_they_lack(tmp_path: Path) -> None:
    labels = [
        "spatial-only + averaging",
        *(f"mix {f:g}, attention head" for f in temporal_reasoning.MIXED_FRACTIONS),
    ]
    curve = [{"step": 1000, "train_loss": 1.0, "val_top1": 0.5, "val_direction": 0.5}]
    earlier = [
        {"label": label, "seed": 0, "curve": curve, "preset": "xvit_tiny", "options": {}} for label in labels
    ]
    budget = temporal_reasoning.FULL.__dict__
    path = tmp_path / "earlier.json"
    path.write_text(json.dumps({"inputs": {"budget": budget}, "raw": {"results": earlier}}))
    # every requested (variant, seed) is in the file: nothing is trained, all of it is reported
    result = temporal_reasoning.run(
        tmp_path / "out", seeds=1, fractions=(0.25, 0.5), baseline=False, reuse=path
    )
    assert [run["label"] for run in result.raw["results"]] == labels
    chosen = temporal_reasoning.variants(False, seeds=2, fractions=(0.25, 0.5), baseline=False)
    assert [(v.label, v.seed) for v in chosen] == [
        ("mix 0.25, attention head", 0),
        ("mix 0.5, attention head", 0),
        ("mix 0.25, attention head", 1),
        ("mix 0.5, attention head", 1),
    ]
    path.write_text(json.dumps({"inputs": {"budget": {**budget, "steps": 10}}, "raw": {"results": earlier}}))
    with pytest.raises(SystemExit, match="another budget"):
        temporal_reasoning.run(tmp_path / "out", seeds=1, reuse=path)
