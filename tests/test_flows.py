"""Prefect flows under a real (temporary) Prefect API: the whole pipeline, resume, deployments."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from uuid import UUID

import mlflow
import pandas as pd
import pytest
import yaml
from demo_config import config_file, shrunk_demo_config
from infra_manifests import assert_deployment_runs
from mlflow import MlflowClient
from prefect.cli.deploy._schedules import _construct_schedules
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import DeploymentScheduleCreate
from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
from prefect.client.schemas.objects import Artifact
from prefect.client.schemas.schedules import CronSchedule
from prefect.logging.handlers import APILogWorker
from prefect.settings import PREFECT_API_URL
from rich.console import Console

from flows.forms import PipelineForm, ShardForm
from flows.pipeline import PipelineResult
from vidtx.config import (
    PipelineConfig,
    ShardConfig,
    SynthConfig,
    dump_config,
    load_config,
)
from vidtx.serving.classifier import OUTPUT_COLUMNS
from vidtx.tracking.runs import mlflow_uris

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_api")]


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


def test_video_pipeline_end_to_end_then_remade_from_its_logged_config(tmp_path: Path) -> None:
    from flows.pipeline import render_summary, video_pipeline

    config = pipeline_config(tmp_path)
    summary = video_pipeline(PipelineForm(config=config_file(config, tmp_path)))

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
    # The run records the configuration the pipeline was given, whole (issue 43 case 6; was: the sections
    # training reads and defaults for the rest: synth null, shard.max_samples_per_shard 1000, ...), as
    # it trained: on the shards the pipeline wrote
    logged = Path(tracking.download_artifacts(run.info.run_id, "config.yaml", str(tmp_path)))
    assert load_config(logged) == config.model_copy(
        update={"data": config.data.model_copy(update={"shards": config.shard.output})}
    )
    params = run.data.params
    assert (params["synth.size"], params["shard.max_samples_per_shard"], params["registry.model_name"]) == (
        "32",
        "8",
        "flow-model",
    )
    # the registered champion is what MLflow's own tools load: a pyfunc taking encoded videos
    test_videos = sorted((config.synth.output / "test").rglob("*.mp4"))[:2]
    with mlflow_uris(uri), pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "path", list(sys.path))  # the pyfunc loader puts the model's code first
        answer = mlflow.pyfunc.load_model("models:/flow-model@champion").predict(
            pd.DataFrame({"video": [video.read_bytes() for video in test_videos]})
        )
    assert list(answer.columns) == list(OUTPUT_COLUMNS)
    assert answer["error"].tolist() == [None, None]

    found = artifacts()
    assert {"table", "progress", "markdown"} <= set(found)  # Prefect stores link artifacts as markdown
    assert {a.key for a in found["table"]} >= {"shards", "rejects"}
    assert any(a.data == 100.0 for a in found["progress"])
    markdown = " ".join(a.data for a in found["markdown"])
    assert "Confusion matrix" in markdown
    # Every MLflow link opens the UI's model-training view (MLflow 3.17 starts a new browser on GenAI).
    ml_view = "?workflowType=machine_learning"
    assert f"[flow-model v1](http://127.0.0.1:5000/#/models/flow-model/versions/1{ml_view})" in markdown
    assert f"/runs/{summary.mlflow_run_id}{ml_view})" in markdown
    assert render_summary(summary).splitlines()[0].startswith("video-pipeline demo finished: test top-1")
    assert f"flow-run, MLflow run {summary.mlflow_run_id} -> {summary.mlflow_run_url}" in render_summary(
        summary
    )

    # Lineage: the train-model flow's table, and the same table plus the model version in the summary.
    flow_run_id = run.data.tags["prefect.flow_run_id"]
    prefect_ui = PREFECT_API_URL.value().removesuffix("/api") + "/v2"  # the harness's server, its new UI
    run_page = f"http://127.0.0.1:5000/#/experiments/{run.info.experiment_id}/runs/{summary.mlflow_run_id}"
    mlflow_run = f"[{summary.mlflow_run_id}]({run_page}{ml_view})"
    lineage = [
        f"| Prefect flow run | [{flow_run_id}]({prefect_ui}/runs/flow-run/{flow_run_id}) |",
        f"| data manifest (train) | `{summary.splits['train'].content_hash}` |",
        f"| MLflow run | {mlflow_run} |",
        f"| git commit | `{run.data.tags['mlflow.source.git.commit']}` |",
    ]
    assert latest_artifact("lineage").data.splitlines()[2:] == lineage
    # The summary sends a person to the run's experiment in the model-training view (not MLflow's
    # root, which opens the GenAI pages) and to the Prefect UI the server opens at its root (V2).
    experiment = f"http://127.0.0.1:5000/#/experiments/{run.info.experiment_id}{ml_view}"
    assert f"  browse         {experiment} (MLflow) and {prefect_ui} (Prefect)" in render_summary(summary)
    pipeline_summary = latest_artifact("pipeline-summary").data
    model_version = f"[flow-model v1](http://127.0.0.1:5000/#/models/flow-model/versions/1{ml_view})"
    assert pipeline_summary.splitlines()[-5:] == [*lineage, f"| model version | {model_version} |"]
    assert f"- training run: flow-run, MLflow run {mlflow_run}" in pipeline_summary.splitlines()
    shards = latest_artifact("shards").description
    assert re.search(r"reused 0 of [1-9]\d* shards \(already complete from the same plan\)", shards)

    # The run re-made from its logged config under another name, as `vidtx pipeline` runs it: a child
    # process on a temporary local Prefect API of its own. It is the same run (issue 43 case 6): its
    # logged config, and its loss at every step. (A training resumed under the same name: test_train.)
    remade_config = load_config(logged, ["train.run_name=remade"])
    remade, console, log_file = pipeline_in_a_child_process(remade_config, tmp_path)
    assert remade.mlflow_run_id != summary.mlflow_run_id
    remade_logged = tracking.download_artifacts(remade.mlflow_run_id, "config.yaml", str(tmp_path / "remade"))
    assert load_config(remade_logged, ["train.run_name=flow-run"]) == load_config(logged)
    assert loss_curve(tracking, remade.mlflow_run_id) == loss_curve(tracking, summary.mlflow_run_id)
    assert remade.model_version == "2"
    assert "challenger" in remade.aliases  # no better than the champion: the same run
    assert "the most a model blind to frame order can reach here" in (remade.frame_order or "")
    # Nothing changed in the dataset: every shard of the second run is the first run's.
    in_file = log_file.read_text()
    assert re.search(r"reused ([1-9]\d*) of \1 shards \(already complete from the same plan\)", in_file)

    # The console: stage headers, the validation figures and errors only; the rest is in the file.
    assert len(console) < 25, "\n".join(console)
    assert [line.split(": ", 1)[1] for line in console if "flows.pipeline: [" in line] == [
        f"[1/4] shard-dataset: {config.shard.source} -> {config.shard.output}",
        "[2/4] train-model: remade: 2 workers, 6 steps",
        "[3/4] evaluate-model: test split, 1x3 views",
        "[4/4] register-model: flow-model",
    ]
    assert any("vidtx.train.progress: step 6: validation top-1" in line for line in console)
    # The flow run's own log (Prefect's logger, also in the file) carries the validation figures too,
    # one line per event: the last step once, its validation once (a poll may bring it after the step).
    flow_lines = [line for line in in_file.splitlines() if "prefect.task_runs" in line]
    assert len([line for line in flow_lines if "step 6/6 train/clips" in line]) == 1, "\n".join(flow_lines)
    assert (
        len([line for line in flow_lines if re.search(r"step 6: validation top-1 \d\.\d{3}, top-5", line)])
        == 1
    )
    record = re.compile(r"\d\d:\d\d:\d\d \w+ +(\w+)[\w.]*: ")
    assert {match[1] for line in console if (match := record.match(line))} == {"vidtx", "flows"}
    assert not any("Traceback" in line or "HTTP Request" in line for line in console)
    assert "ray.workers: (RayTrainWorker pid=" in in_file
    # The shard flow's task processes use this run's temporary API instead of starting their own.
    assert in_file.count("Starting temporary server") == 1


def loss_curve(tracking: MlflowClient, run_id: str) -> list[tuple[int, float]]:
    return sorted((point.step, point.value) for point in tracking.get_metric_history(run_id, "train/loss"))


def flow_run_log(flow_run_id: UUID) -> list[tuple[str, str]]:
    """(task run name or "", message) of every record of the flow run, in order. The lines of the
    flow's task processes reach the API through this process's API log worker, which sends them in
    batches every 2 s (a run's last `write` line was still queued when the run returned): it is
    drained first."""
    APILogWorker.drain_all(timeout=30)
    with get_client(sync_client=True) as client:
        names = {task.id: task.name for task in client.read_task_runs()}
        records = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
    return [(names.get(r.task_run_id, ""), r.message) for r in sorted(records, key=lambda r: r.timestamp)]


def test_each_shard_dataset_task_is_named_by_what_it_works_on_and_says_what_it_did(tmp_path: Path) -> None:
    """Issue 43 case 7: a shard-dataset run's log was identical "Finished in state Completed()" lines
    and one vidtx line; nothing said that synthesis was skipped."""
    from flows.shard import shard_dataset

    synth = SynthConfig(output=tmp_path / "videos", classes=["moving_left", "moving_right"],
                        videos_per_class={"train": 2, "val": 2}, num_frames=8, size=32)  # fmt: skip
    shard = ShardConfig(
        source=synth.output / "annotations.csv", output=tmp_path / "shards", max_samples_per_shard=2
    )
    settings = ShardForm(config=config_file(PipelineConfig(synth=synth, shard=shard), tmp_path))
    for attempt in ("first", "again"):
        state = shard_dataset(settings, return_state=True)
        lines = [
            line
            for line in flow_run_log(state.state_details.flow_run_id)
            if "Finished in state" not in line[1]
        ]
        said = {task: message for task, message in lines if task}
        made = "generated the synthetic dataset: " if attempt == "first" else ""
        skipped = (
            "" if attempt == "first" else " is there already: the synthetic dataset is not generated again"
        )
        assert said[f"synthesize {synth.output}"] == f"{made}{synth.output / 'annotations.csv'}{skipped}"
        assert said[f"plan {shard.source}"] == f"planned 4 shards (2 of train, 2 of val) into {shard.output}"
        done = "written" if attempt == "first" else "reused (complete from the same plan)"
        for name in ("train-000000.tar", "train-000001.tar", "val-000000.tar", "val-000001.tar"):
            assert re.fullmatch(
                rf"{name} {re.escape(done)}: 2 samples, 0 rejected, \d+\.\d MB", said[f"write {name}"]
            )
        manifest = shard.output / "val.manifest.json"
        assert said["finalize val"] == f"val: 4 samples in 2 shards, 0 rejected; manifest {manifest}"
        # the flow run's own lines end with what was written, as `vidtx shard` prints it
        reused = 0 if attempt == "first" else 4
        assert [message for task, message in lines if not task][-4:] == [
            f"train: 4 samples in 2 shards, 0 rejected -> {shard.output / 'train.manifest.json'}",
            f"val: 4 samples in 2 shards, 0 rejected -> {manifest}",
            f"8 found: 8 sharded, 0 rejected, 0 ignored (see {shard.output / 'ignored.jsonl'})",
            f"{shard.output}: reused {reused} of 4 shards (already complete from the same plan)",
        ]


def pipeline_in_a_child_process(
    config: PipelineConfig, tmp_path: Path
) -> tuple[PipelineResult, list[str], Path]:
    """`python -m flows.pipeline CONFIG --json` (what `vidtx pipeline` runs) without a Prefect API:
    (its result, its console lines, its log file)."""
    config_file = tmp_path / "pipeline.yaml"
    config_file.write_text(dump_config(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIDTX_", "PREFECT_API_"))}
    env["PREFECT_HOME"] = str(tmp_path / "prefect")
    command = [sys.executable, "-m", "flows.pipeline", str(config_file), "--json"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stderr
    console = done.stderr.splitlines()
    log_file = Path(console[0].rsplit(" ", 1)[1])
    return PipelineResult.model_validate_json(done.stdout), console, log_file


def test_video_pipeline_checks_the_model_and_the_evaluation_split_before_training(tmp_path: Path) -> None:
    from flows.pipeline import video_pipeline

    config = pipeline_config(tmp_path)
    settings = PipelineForm(config=config_file(config, tmp_path), overrides=["data.crop_size=28"])
    state = video_pipeline(settings, return_state=True)  # 28: not a multiple of the patch size (8)
    assert state.is_failed()
    assert re.fullmatch(r"error: data.crop_size=28.*not a multiple of patch_size 8.*", state.message)
    assert not (tmp_path / "shards").exists()  # before any sharding
    settings = PipelineForm(config=settings.config, overrides=["data.crop_sise=32"])
    assert video_pipeline(settings, return_state=True).message.startswith(
        "error: --set data.crop_sise=32: data.crop_sise: no such setting; nearby: data.crop_size"
    )  # the same line as `vidtx pipeline --set data.crop_sise=32`
    config.synth.videos_per_class = {"train": 2, "val": 1}  # no test split: eval.split is test
    with pytest.raises(FileNotFoundError, match=r"eval.split 'test': .*\(splits there: train, val\)"):
        video_pipeline(PipelineForm(config=config_file(config, tmp_path)))
    assert not (tmp_path / "ray").exists()  # before any training


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
    """The local deployments' forms name configs/experiments/demo.yaml (the sweep: demo_sweep.yaml)."""
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    demo = load_config(ROOT / "configs/experiments/demo.yaml")
    demo_sweep = load_config(ROOT / "configs/experiments/demo_sweep.yaml")
    local = [
        d for d in spec["deployments"] if d["work_pool"]["name"] == "vidtx-process" and d["name"] != "stack"
    ]
    demo_pretrain = load_config(ROOT / "configs/experiments/demo_pretrain.yaml")
    assert len(local) == 8
    for deployment in local:
        entrypoint = deployment["entrypoint"]
        expected = demo_sweep if entrypoint.endswith(":sweep_model") else demo
        assert_deployment_runs(
            deployment, demo_pretrain if entrypoint.endswith(":pretrain_model") else expected
        )


def test_the_stack_deployment_runs_the_stack_config_on_sources_already_uploaded() -> None:
    """video-pipeline/stack runs configs/experiments/stack.yaml less `synth` (make demo-stack generates
    and uploads those sources first; the flow must not generate them on its machine)."""
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    stack = load_config(ROOT / "configs/experiments/stack.yaml")
    assert stack.synth is not None
    (deployment,) = [d for d in spec["deployments"] if d["name"] == "stack"]
    assert deployment["entrypoint"] == "flows/pipeline.py:video_pipeline"
    assert_deployment_runs(deployment, stack.model_copy(update={"synth": None}))
    assert (stack.shard.executor, stack.shard.output, stack.data.shards) == ("ray", *[stack.shard.output] * 2)
    assert stack.shard.source.startswith("s3://")
    assert stack.train.storage_path.startswith("s3://")


def test_batch_predict_writes_the_table_and_links_the_version_it_used(
    registered_model: str, tmp_path: Path, write_mp4
) -> None:
    import pyarrow.parquet as pq

    from flows.forms import PredictForm
    from flows.predict import batch_predict

    for i in range(3):
        write_mp4(tmp_path / "videos" / f"{i}.mp4", num_frames=8, width=32, height=32)
    (tmp_path / "videos" / "bad.mp4").write_bytes(b"not a video")
    output = tmp_path / "predictions.parquet"
    settings = PredictForm(
        videos=[str(tmp_path / "videos")],
        output=str(output),
        top_k=2,
        model="models:/predict-test@champion",
        tracking_uri=registered_model,
    )
    state = batch_predict(settings, return_state=True)
    summary = state.result()
    assert (summary.videos, summary.failed, summary.model_uri) == (4, 1, "models:/predict-test/1")
    # its log, one line per event in the order they happen: the version resolved, then the scoring
    log = [
        (re.sub(r"-[0-9a-f]{3}$", "", task), message)
        for task, message in flow_run_log(state.state_details.flow_run_id)
    ]
    assert [entry for entry in log if entry[0] and "Finished" not in entry[1]] == [
        ("resolve_model", "models:/predict-test@champion is models:/predict-test/1"),
        ("score with models:/predict-test/1", summary.text()),
    ]
    assert [task for task, message in log if "Finished" in message] == [
        "resolve_model",
        "score with models:/predict-test/1",
        "",
    ]
    assert pq.read_table(output).num_rows == 4
    artifact = latest_artifact("batch-predictions").data
    assert "[predict-test v1](" in artifact
    assert f"| {tmp_path / 'videos' / 'bad.mp4'} |" in artifact
