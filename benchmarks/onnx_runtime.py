"""Issue 60 point 4: a clip's logits from the ONNX export in onnxruntime against eager PyTorch.

Each model is exported as `vidtx export` exports it (`vidtx.serving.onnx_export.export_onnx`: the
`torch.export` graph, a dynamic batch, checked against PyTorch on decoded clips), then one clip's
forward pass is timed in both, interleaved and compared per round (`benchmarks.timing`), on one
thread each (torch's intra-op threads, onnxruntime's `intra_op_num_threads`), fp32, on this CPU.
Models: the demo's X-ViT (xvit_tiny, the demo config's 8 frames at 56 px) and X-ViT B/16 at 8x224
(the paper's SSv2 setting). Each is exported twice, as is and through onnxscript's graph optimizer
(`export.optimize`). The largest logit difference of the export's own check is reported beside the
time; the time of the export itself too.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import onnxruntime
import torch

from benchmarks.results import BenchmarkResult, Table, fmt
from benchmarks.timing import round_ratios, time_interleaved, torch_threads
from vidtx.config import load_config
from vidtx.model_factory import model_for
from vidtx.serving.onnx_export import INPUT, OUTPUT, check_clips, export_onnx

log = logging.getLogger(__name__)

DEMO = Path(__file__).resolve().parent.parent / "configs/experiments/demo.yaml"
# label -> overrides of the demo config, the export.optimize settings measured. B/16 without the
# optimizer: with it, its measurement had not finished after 17 minutes on this machine.
MODELS = {
    "demo X-ViT (xvit_tiny, 8x56)": ([], (False, True)),
    "X-ViT B/16, 8x224": (
        ["model.name=xvit_b16_8x224", "data.crop_size=224", "data.short_side=224"],
        (False,),
    ),
}
QUICK_MODELS = {"demo X-ViT (xvit_tiny, 8x56)": ([], (False, True))}


def measure(overrides: list[str], optimizes: tuple[bool, ...], repeats: int, folder: Path) -> dict:
    config = load_config(DEMO, [*overrides, "export.videos=2"])
    torch.manual_seed(0)
    model = model_for(config, num_classes=174).eval()  # SSv2's classes: the data need not exist
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    clip = check_clips(config)[:1]  # (1, 3, T, H, W)
    feed = {INPUT: clip.numpy()}
    candidates, exports = {}, {}
    for optimize in optimizes:  # export.optimize: onnxscript's graph optimizer, or not
        name = "onnxruntime, optimized" if optimize else "onnxruntime"
        settings = config.model_copy(
            update={"export": config.export.model_copy(update={"optimize": optimize})}
        )
        exported = exports[name] = export_onnx(
            model, settings, folder / f"{config.model.name}-{optimize}.onnx"
        )
        session = onnxruntime.InferenceSession(
            str(exported.path), options, providers=["CPUExecutionProvider"]
        )
        candidates[name] = lambda session=session: session.run([OUTPUT], feed)

    def eager() -> None:
        with torch.no_grad():
            model(clip)

    seconds = time_interleaved({"eager": eager, **candidates}, warmup=1, repeats=repeats)
    return {
        "seconds": seconds,
        "ratio": {name: round_ratios(seconds[name], seconds["eager"]) for name in candidates},
        "max_abs_diff": {name: exported.max_abs_diff for name, exported in exports.items()},
        "export_seconds": {name: exported.seconds for name, exported in exports.items()},
    }


def run(output_dir: Path, quick: bool = False) -> BenchmarkResult:
    models = QUICK_MODELS if quick else MODELS
    repeats = 2 if quick else 3
    raw, rows = {}, []
    with torch_threads(1), tempfile.TemporaryDirectory() as folder:
        for label, (overrides, optimizes) in models.items():
            log.info("onnxruntime vs eager: %s", label)
            case = raw[label] = measure(overrides, optimizes, repeats, Path(folder))
            for name, samples in case["seconds"].items():
                exported = name != "eager"
                rows.append(
                    [
                        label,
                        name,
                        fmt(samples.median * 1000),
                        f"{fmt(case['ratio'][name].median, 2)}x" if exported else "1x",
                        f"{case['max_abs_diff'][name]:.2g}" if exported else "",
                        fmt(case["export_seconds"][name]) if exported else "",
                    ]
                )
    notes = [
        "Against eager PyTorch, per clip: "
        + "; ".join(
            f"{label}: "
            + ", ".join(f"{name} {fmt(ratio.median, 2)}x" for name, ratio in case["ratio"].items())
            for label, case in raw.items()
        )
        + " (one thread each, fp32, batch 1; below 1x is faster).",
        "The export's logits are within the largest difference shown of PyTorch's on decoded clips; "
        "export.tolerance is 1e-4.",
    ]
    return BenchmarkResult(
        name="onnx_runtime",
        title="ONNX export in onnxruntime vs eager PyTorch, per clip",
        summary=(__doc__ or "").strip(),
        inputs={"models": models, "repeats": repeats, "threads": 1},
        tables=[
            Table(
                "One clip's forward pass, median of interleaved rounds",
                ["model", "runs in", "per clip (ms)", "time vs eager", "max |logit diff|", "export (s)"],
                rows,
            )
        ],
        raw=raw,
        notes=notes,
        quick=quick,
    )
