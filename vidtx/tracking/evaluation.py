"""Evaluation results into the training run's MLflow run: metrics, the per-class table and, for a
single-label model, the confusion matrix (a multi-label model's table holds per-class AP)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from mlflow import MlflowClient

from vidtx.eval.report import confusion_figure, per_class_rows, write_csv
from vidtx.results import EvalResult, MultiLabelMetrics
from vidtx.tracking.runs import log_metrics

# How many videos were evaluated and skipped say what was measured, not how well: tags, so that MLflow
# draws no single-value bar chart of them among the metrics (a newcomer met `skipped 0.00` first).
COUNTS = ("videos", "skipped")


def log_evaluation(client: MlflowClient, run_id: str, result: EvalResult) -> dict[str, str]:
    """Log `result` under `eval/<split>/…`; returns the artifact paths (relative to the run).

    Metrics: the primary ensemble's (multi-label: aggregation's) scalars unprefixed, every one's under
    its name (`eval/test/top1`, `eval/test/prob_mean/top1`; `eval/test/mean_ap`, `eval/test/max/mean_ap`).
    """
    prefix = f"eval/{result.split}"
    values = result.metrics()
    log_metrics(
        client, run_id, {f"{prefix}/{name}": value for name, value in values.items() if name not in COUNTS}, 0
    )
    primary = result.by_ensemble[result.primary]
    settings = (
        {"aggregation": result.primary, "threshold": f"{primary.threshold:g}"}
        if isinstance(primary, MultiLabelMetrics)
        else {"ensemble": result.primary}
    )
    for key, value in {
        "views": result.views,
        **settings,
        "manifest_hash": result.manifest_hash,
        **{count: f"{values[count]:.0f}" for count in COUNTS},
    }.items():
        client.set_tag(run_id, f"vidtx.{prefix}.{key}".replace("/", "."), value)

    artifacts = {}
    if not isinstance(primary, MultiLabelMetrics):
        figure = confusion_figure(
            primary, result.class_names, f"{result.split}, {result.views} views, {result.primary}"
        )
        artifacts["confusion_matrix"] = f"{prefix}/confusion_matrix.png"
        client.log_figure(run_id, figure, artifacts["confusion_matrix"])
    return artifacts | _log_per_class(client, run_id, result, prefix)


def _log_per_class(client: MlflowClient, run_id: str, result: EvalResult, prefix: str) -> dict[str, str]:
    """The per-class table (`per_class_rows`) as an MLflow table (the UI's artifact view) and a CSV."""
    rows = per_class_rows(result.by_ensemble, result.class_names)
    artifacts = {"per_class_table": f"{prefix}/per_class.json", "per_class_csv": f"{prefix}/per_class.csv"}
    client.log_table(
        run_id, {column: [row[column] for row in rows] for column in rows[0]}, artifacts["per_class_table"]
    )
    with tempfile.TemporaryDirectory() as directory:
        client.log_artifact(run_id, str(write_csv(rows, Path(directory) / "per_class.csv")), prefix)
    return artifacts
