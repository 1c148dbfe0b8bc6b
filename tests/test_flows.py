"""Prefect flows under a real (temporary) Prefect API: the whole pipeline, resume, deployments."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from demo_config import shrunk_demo_config
from infra_manifests import assert_deployment_runs
from mlflow import MlflowClient
from prefect.cli.deploy._schedules import _construct_schedules
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import DeploymentScheduleCreate
from prefect.client.schemas.filters import LogFilter, LogFilterTextSearch
from prefect.client.schemas.objects import Artifact
from prefect.client.schemas.schedules import CronSchedule
from prefect.flows import load_flow_from_entrypoint
from prefect.settings import PREFECT_API_URL
from prefect.testing.utilities import prefect_test_harness
from rich.console import Console

from vidtx.config import ConfigError, PipelineConfig, load_config

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def prefect_api() -> Iterator[None]:
    with prefect_test_harness(server_startup_timeout=180):
        yield


def pipeline_config(tmp_path: Path) -> PipelineConfig:
    return shrunk_demo_config(
        tmp_path, "train.run_name=flow-run", "train.log_every=2", "registry.model_name=flow-model"
    )


def artifacts() -> dict[str, list]:
    with get_client(sync_client=True) as client:
        found: dict[str, list] = {}
        for artifact in client.read_artifacts():
            found.setdefault(artifact.type, []).append(artifact)
        return found


def latest_artifact(key: str) -> Artifact:
    with get_client(sync_client=True) as client:
        return max((a for a in client.read_artifacts() if a.key == key), key=lambda a: a.created)


def logged(text: str) -> list[str]:
    """Messages of the flow and task run logs that the API stored, holding `text`."""
    with get_client(sync_client=True) as client:
        logs = client.read_logs(LogFilter(text=LogFilterTextSearch(query=f'"{text}"')))
        return [log.message for log in logs]


def test_video_pipeline_end_to_end_then_resumes(tmp_path: Path) -> None:
    from flows.pipeline import render_summary, video_pipeline

    config = pipeline_config(tmp_path)
    summary = video_pipeline(config)

    assert summary.splits["train"].samples == 24
    assert summary.run_name == "flow-run"
    assert summary.model_version == "1"
    assert set(summary.aliases) == {"champion", "challenger"}
    assert 0.0 <= summary.metrics["top1"] <= 1.0
    uri = f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    tracking = MlflowClient(uri, registry_uri=uri)
    version = tracking.get_model_version_by_alias("flow-model", "champion")
    assert version.run_id == summary.mlflow_run_id
    run = tracking.get_run(summary.mlflow_run_id)
    assert "prefect.flow_run_id" in run.data.tags
    assert "eval/test/top1" in run.data.metrics

    found = artifacts()
    assert {"table", "progress", "markdown"} <= set(found)  # Prefect stores link artifacts as markdown
    assert {a.key for a in found["table"]} >= {"shards", "rejects"}
    assert any(a.data == 100.0 for a in found["progress"])
    markdown = " ".join(a.data for a in found["markdown"])
    assert "Confusion matrix" in markdown
    assert "[flow-model v1](http://127.0.0.1:5000/#/models/flow-model/versions/1)" in markdown
    assert f"/runs/{summary.mlflow_run_id})" in markdown
    assert render_summary(summary).splitlines()[0].startswith("video-pipeline demo finished: test top-1")
    assert f"flow-run, MLflow run {summary.mlflow_run_id} -> {summary.mlflow_run_url}" in render_summary(
        summary
    )

    # Lineage: the train-model flow's table, and the same table plus the model version in the summary.
    flow_run_id = run.data.tags["prefect.flow_run_id"]
    prefect_ui = PREFECT_API_URL.value().removesuffix("/api")  # the test harness's server
    mlflow_run = f"[{summary.mlflow_run_id}](http://127.0.0.1:5000/#/runs/{summary.mlflow_run_id})"
    lineage = [
        f"| Prefect flow run | [{flow_run_id}]({prefect_ui}/runs/flow-run/{flow_run_id}) |",
        f"| data manifest (train) | `{summary.splits['train'].content_hash}` |",
        f"| MLflow run | {mlflow_run} |",
        f"| git commit | `{run.data.tags['mlflow.source.git.commit']}` |",
    ]
    assert latest_artifact("lineage").data.splitlines()[2:] == lineage
    pipeline_summary = latest_artifact("pipeline-summary").data
    model_version = "[flow-model v1](http://127.0.0.1:5000/#/models/flow-model/versions/1)"
    assert pipeline_summary.splitlines()[-5:] == [*lineage, f"| model version | {model_version} |"]
    assert f"- training run: flow-run, MLflow run {mlflow_run}" in pipeline_summary.splitlines()
    shards = latest_artifact("shards").description
    assert re.search(r"reused 0 of [1-9]\d* shards \(already complete from the same plan\)", shards)

    # The same run name again, with a longer budget: training resumes from its checkpoint at step 6.
    config.train.max_steps = 9
    again = video_pipeline(config)
    assert again.mlflow_run_id == summary.mlflow_run_id
    resumed = tracking.get_metric_history(summary.mlflow_run_id, "train/resumed_from_step")
    assert [(point.step, point.value) for point in resumed] == [(6, 6.0)]
    assert again.model_version == "2"
    assert "challenger" in again.aliases
    # Nothing changed in the dataset: every shard of the second run is the first run's.
    reuse = re.compile(r"reused ([1-9]\d*) of \1 shards \(already complete from the same plan\)")
    assert reuse.search(latest_artifact("shards").description)
    assert any(reuse.search(message) for message in logged("already complete from the same plan"))


def test_video_pipeline_checks_the_model_and_the_evaluation_split_before_training(tmp_path: Path) -> None:
    from flows.pipeline import video_pipeline

    config = pipeline_config(tmp_path)
    config.data.crop_size = 28  # not a multiple of the patch size (8)
    with pytest.raises(ConfigError, match=r"data.crop_size=28.*not a multiple of patch_size 8"):
        video_pipeline(config)
    assert not (tmp_path / "shards").exists()  # before any sharding
    config = pipeline_config(tmp_path)
    config.synth.videos_per_class = {"train": 2, "val": 1}  # no test split: eval.split is test
    with pytest.raises(FileNotFoundError, match=r"eval.split 'test': .*\(splits there: train, val\)"):
        video_pipeline(config)
    assert not (tmp_path / "ray").exists()  # before any training


def test_deployments_validate_and_expose_the_config_form() -> None:
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    deployments = spec["deployments"]
    flows = ("shard_dataset", "train_model", "evaluate_model", "register_model", "video_pipeline")
    targets = {(d["entrypoint"].split(":")[1], d["work_pool"]["name"]) for d in deployments}
    assert {(flow, pool) for flow in flows for pool in ("vidtx-process", "vidtx-kubernetes")} <= targets
    for deployment in deployments:
        flow = load_flow_from_entrypoint(str(ROOT / deployment["entrypoint"]))
        flow.validate_parameters(deployment.get("parameters") or {})
        schema = flow.parameters.model_dump()
        if "config" in schema["properties"]:
            config_schema = schema["definitions"]["PipelineConfig"]["properties"]
            assert {"data", "model", "train", "eval", "registry"} <= set(config_schema)
            assert "zero_stage" in schema["definitions"]["TrainConfig"]["properties"]


def test_nightly_schedules_are_deployed_inactive() -> None:
    """Read the way `prefect deploy` reads them (its own parser, then the client schema it sends)."""
    deployments = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
    schedules = [
        DeploymentScheduleCreate(**schedule)
        for deployment in deployments
        for schedule in _construct_schedules(deployment, {}, console=Console(), is_interactive=lambda: False)
        or []
    ]
    assert {s.slug for s in schedules} == {"nightly-retrain", "nightly-retrain-cluster"}
    assert all(isinstance(s.schedule, CronSchedule) and s.active is False for s in schedules)


def test_local_deployments_run_the_demo_config() -> None:
    """prefect.yaml repeats configs/experiments/demo.yaml for the local deployments' parameters."""
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    demo = load_config(ROOT / "configs/experiments/demo.yaml")
    assert PipelineConfig.model_validate(spec["definitions"]["local_demo"]) == demo
    local = [d for d in spec["deployments"] if d["work_pool"]["name"] == "vidtx-process"]
    assert len(local) == 5
    for deployment in local:
        assert_deployment_runs(deployment, demo)
