"""The lineage table of a trained model, for the Markdown artifacts of `train-model` and `video-pipeline`.

A Markdown artifact rather than a table artifact: the Prefect UI renders links only in Markdown.
"""

from __future__ import annotations

from prefect.settings import PREFECT_UI_URL, get_current_settings

from vidtx.config import PipelineConfig
from vidtx.results import ModelVersionInfo
from vidtx.tracking.lineage import run_lineage
from vidtx.tracking.links import model_version_link

LOCAL_PREFECT_UI = "http://127.0.0.1:4200"  # where `make ui` serves the Prefect UI
V2_UI = "/v2"  # the path of Prefect's new UI


def prefect_ui() -> str:
    """The Prefect UI that a link should open: PREFECT_UI_URL (when unset, Prefect derives it from
    PREFECT_API_URL without `/api`), else the local UI of `make ui`, in the version the server opens
    at its root. Prefect 3.9 serves its new UI under `/v2` and opens that one at the root
    (`server.ui.v2_enabled`, on by default), while the routes without `/v2` (`/runs/flow-run/ID`)
    still answer with the old, dark one."""
    base = (PREFECT_UI_URL.value() or LOCAL_PREFECT_UI).rstrip("/")
    v2 = get_current_settings().server.ui.v2_enabled
    return f"{base}{V2_UI}" if v2 and not base.endswith(V2_UI) else base


def flow_run_link(flow_run_id: str) -> str:
    """The flow run's page in the Prefect UI."""
    return f"{prefect_ui()}/runs/flow-run/{flow_run_id}"


def lineage_table(config: PipelineConfig, mlflow_run_id: str, version: ModelVersionInfo | None = None) -> str:
    """A two-column Markdown table: the Prefect flow run that trained the MLflow run, the training
    data's manifest hash, the MLflow run, the git commit, and the registered model `version` if given."""
    lineage = run_lineage(config, mlflow_run_id)
    missing = "not recorded"
    rows = [
        (
            "Prefect flow run",
            f"[{lineage.flow_run_id}]({flow_run_link(lineage.flow_run_id)})"
            if lineage.flow_run_id
            else missing,
        ),
        (
            f"data manifest ({config.data.train_split})",
            f"`{lineage.manifest_hash}`" if lineage.manifest_hash else missing,
        ),
        ("MLflow run", f"[{mlflow_run_id}]({lineage.mlflow_run_url})"),
        ("git commit", f"`{lineage.git_commit}`" if lineage.git_commit else missing),
        *([("started from", f"`{lineage.init_from}`")] if lineage.init_from else []),
    ]
    if version is not None:
        url = model_version_link(config, version.name, version.version)
        rows.append(("model version", f"[{version.name} v{version.version}]({url})"))
    return "\n".join(["| lineage | |", "|---|---|", *(f"| {name} | {value} |" for name, value in rows)])
