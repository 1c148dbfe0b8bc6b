"""Evaluation reports: the results as text, a confusion-matrix figure and a per-class table (a
multi-label model's: per-class AP, and no confusion matrix)."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from vidtx.markdown import markdown_table
from vidtx.results import ClassificationMetrics, EvalResult, Metrics, MultiLabelMetrics

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# How the reports title each scalar of `ClassificationMetrics.scalars` / `MultiLabelMetrics.scalars`.
TITLES = {
    "top1": "top-1",
    "top5": "top-5",
    "mean_class_accuracy": "mean class accuracy",
    "mean_ap": "mAP",
    "micro_f1": "micro F1",
    "macro_f1": "macro F1",
}


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def render_results(result: EvalResult) -> str:
    """The evaluation as Markdown, a line and a table with one row per view ensemble (a multi-label
    model's: per view aggregation): what the CLI prints, the Prefect artifact shows and the model card
    holds (Markdown reads well as plain text)."""
    rows = [
        [f"{name}{' (primary)' if name == result.primary else ''}", *map(_number, m.scalars().values())]
        for name, m in result.by_ensemble.items()
    ]
    primary = result.by_ensemble[result.primary]
    heading = (
        f"Split `{result.split}`: {result.num_videos} videos ({result.num_skipped} skipped), "
        f"{result.views} views (clips x crops), loss {result.loss:.4f}."
    )
    if isinstance(primary, MultiLabelMetrics):
        heading += f" A label is predicted from probability {primary.threshold:g} (F1)."
    header = ["aggregation" if result.multilabel else "ensemble", *map(TITLES.get, primary.scalars())]
    return f"{heading}\n\n" + markdown_table(header, rows)


def confusion_figure(metrics: ClassificationMetrics, class_names: Sequence[str], title: str = "") -> Figure:
    """Row-normalised confusion matrix (rows: true class) with counts in the cells."""
    from matplotlib.figure import Figure  # imported when drawn: a training worker never draws one

    size = max(4.0, 0.45 * len(class_names) + 2.0)
    figure = Figure(figsize=(size, size * 0.9), layout="constrained")
    axes = figure.add_subplot()
    counts = metrics.confusion
    rates = [[cell / max(sum(row), 1) for cell in row] for row in counts]
    image = axes.imshow(rates, cmap="Blues", vmin=0.0, vmax=1.0)
    ticks = range(len(class_names))
    axes.set_xticks(ticks, class_names, rotation=60, ha="right", fontsize=8)
    axes.set_yticks(ticks, class_names, fontsize=8)
    axes.set_xlabel("predicted")
    axes.set_ylabel("true")
    axes.set_title(title or f"top-1 {metrics.top1:.1%} on {metrics.num_videos} videos")
    if len(class_names) <= 30:
        for row, values in enumerate(counts):
            for column, count in enumerate(values):
                if count:
                    color = "white" if rates[row][column] > 0.5 else "black"
                    axes.text(column, row, str(count), ha="center", va="center", fontsize=7, color=color)
    figure.colorbar(image, ax=axes, fraction=0.046, pad=0.04)
    return figure


def per_class_rows(by_ensemble: dict[str, Metrics], class_names: Sequence[str]) -> list[dict[str, object]]:
    """One row per class: its support (videos of the class; multi-label: videos with the label) and,
    under each view ensemble, its accuracy (`accuracy_<ensemble>`; multi-label: `ap_<aggregation>`,
    None for a class without a positive)."""
    support = next(iter(by_ensemble.values())).support
    figures = {ensemble: metrics.per_class() for ensemble, metrics in by_ensemble.items()}
    rows = []
    for index, name in enumerate(class_names):
        row: dict[str, object] = {"class_id": index, "class": name, "support": support[index]}
        for ensemble, (column, values) in figures.items():
            row[f"{column}_{ensemble}"] = values[index]
        rows.append(row)
    return rows


def per_class_table(result: EvalResult) -> str:
    """`per_class_rows` as Markdown: a multi-label model's per-class AP table (the text counterpart of
    the per-class table logged to MLflow; a single-label model's shows per-class accuracy)."""
    rows = per_class_rows(result.by_ensemble, result.class_names)
    header = list(rows[0])
    cells = [[_number(v) if isinstance(v, float) or v is None else v for v in row.values()] for row in rows]
    return markdown_table(header, cells)


def write_csv(rows: list[dict[str, object]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path
