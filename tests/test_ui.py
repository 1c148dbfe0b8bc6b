"""The UIs as a person meets them (`make test-ui`; opt-in: needs Debian's `chromium` and the `ui-test`
extra): `infra/local/ui.sh start` as `make ui` runs it, on free ports and a state of its own; a headless
Chromium, driven by Playwright, reads the Prefect and MLflow pages; `ui.sh stop` as `make ui-stop`."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from mlflow import MlflowClient
from ui_stack import Stack, listening, pipeline_config, run_deployment, settings, started_stack, ui_sh

from vidtx.tracking.links import run_link
from vidtx.tracking.runs import connect, resolve_tracking_uri

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("VIDTX_CHROMIUM") or shutil.which("chromium")
DEPLOYED_FLOWS = [
    *("shard-dataset", "train-model", "evaluate-model", "register-model", "video-pipeline", "sweep-model"),
    "pretrain-model",
]
# (deployment, its form's summary, the fields it opens with); every form ends with Overrides
FORMS = [
    ("shard-dataset/local", "Shard a video dataset", ["Config File", "Source", "Output", "Executor"]),
    (
        "train-model/local",
        "One training run",
        ["Config File", "Max Steps", "LR", "Num Workers", "Training Run"],
    ),
    ("evaluate-model/local", "Multi-view evaluation", ["Config File", "Training Run", "Checkpoint", "Split"]),
    ("register-model/local", "A trained model evaluated", ["Config File", "Training Run", "Checkpoint"]),
    ("sweep-model/local", "A hyperparameter sweep", ["Config File", "Num Trials", "Max Concurrent", "Space"]),
    ("pretrain-model/local", "Self-supervised pretraining", ["Config File", "Max Steps", "Mask Ratio", "LR"]),
    ("video-pipeline/demo", "The whole pipeline", ["Config File", "Name", "Max Steps", "LR"]),
    ("batch-predict/local", "Videos scored", ["Videos", "Model", "Output", "Top K"]),
]
TWO_SCREENS = 1_800  # px: a form that fits on two screens at 1400x900

pytestmark = [
    pytest.mark.ui,
    pytest.mark.skipif(
        os.environ.get("VIDTX_TEST_UI") != "1", reason="browser test: run with `make test-ui`"
    ),
]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    with started_stack(tmp_path) as started:
        yield started


def test_the_uis_show_deployments_runs_and_the_champion_and_ui_stop_leaves_nothing(
    stack: Stack, tmp_path: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright

    assert CHROMIUM, "Debian's chromium is needed: apt-get install chromium"
    config = pipeline_config(tmp_path / "run", stack.env["MLFLOW_DB"])
    config.tracking.ui_url = stack.mlflow_url  # the links vidtx writes open this stack's MLflow UI
    shard_run = run_deployment(stack, "shard-dataset/local", settings(config, tmp_path))
    run_deployment(stack, "video-pipeline/demo", settings(config, tmp_path))

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(f"{stack.prefect_url}/deployments")
        for flow in DEPLOYED_FLOWS:
            expect(page.get_by_text(flow, exact=True).first).to_be_visible(timeout=60_000)
        # the shard-dataset run's log: each task says what it did (issue 43 case 7)
        page.goto(f"{stack.prefect_url}/v2/runs/flow-run/{shard_run}")
        expect(page.get_by_text("Completed").first).to_be_visible(timeout=60_000)
        expect(page.get_by_text(re.compile(r"^planned \d+ shards")).first).to_be_visible(timeout=60_000)
        expect(page.get_by_text(re.compile(r"^train-000000\.tar (written|reused)")).first).to_be_visible()
        expect(page.get_by_text("generated the synthetic dataset", exact=False).first).to_be_visible()
        # the flow-run link vidtx writes into the lineage opens the new UI (its root's), not the old one
        (flow_run_link,) = re.findall(
            r"\| Prefect flow run \| \[[^]]+\]\(([^)]+)\)", stack.artifact("lineage")
        )
        assert flow_run_link.startswith(f"{stack.prefect_url}/v2/runs/flow-run/"), flow_run_link
        lineage = browser.new_page()
        lineage.goto(flow_run_link)
        expect(lineage.get_by_text("Switch to V1 UI")).to_be_visible(timeout=60_000)  # the new UI's sidebar
        expect(lineage).to_have_url(re.compile(re.escape(flow_run_link)))  # (a tab may be added)
        page.goto(f"{stack.mlflow_url}/#/models/vidtx-ui-test")
        expect(page.get_by_text("champion").first).to_be_visible(timeout=60_000)
        # what make ui prints and the pipeline's summary says to open in MLflow, each in a fresh profile:
        # the model-training view, not the GenAI pages (traces, costs) MLflow's root opens
        (printed,) = re.findall(r"MLflow UI: +(\S+)", stack.printed)
        (experiment_link,) = re.findall(
            r"- browse: (?:make ui, then )?(\S+) \(MLflow\)", stack.artifact("pipeline-summary")
        )
        for link in (printed, experiment_link):
            opened = browser.new_context().new_page()
            opened.goto(link)
            expect(opened.get_by_text("Model registry").first).to_be_visible(timeout=60_000)
            expect(opened.get_by_text("Total Cost")).to_have_count(0)
            expect(opened).to_have_url(re.compile(r"workflowType=machine_learning"))
        # vidtx's link to the training run, in a fresh profile: the model-training view (the registry
        # shown), not MLflow's GenAI view, which a new browser otherwise starts on.
        client = connect(resolve_tracking_uri(config))
        experiment = client.get_experiment_by_name(config.tracking.experiment)
        (trained,) = client.search_runs([experiment.experiment_id])  # the pipeline's training run
        fresh = browser.new_page()
        fresh.goto(run_link(config, experiment.experiment_id, trained.info.run_id))
        expect(fresh).to_have_url(
            re.compile(rf"/runs/{trained.info.run_id}\?workflowType=machine_learning"), timeout=60_000
        )
        expect(fresh.get_by_text("Model registry").first).to_be_visible(timeout=60_000)
        # from the experiment's runs, in a fresh profile, a click on the run keeps the model-training
        # view (MLflow falls back to GenAI on a click unless the browser chose; `make ui`'s server sets
        # that default), and no Assistant panel opens by itself
        clicked = browser.new_context().new_page()
        clicked.goto(experiment_link)
        clicked.get_by_text(trained.info.run_name, exact=True).first.click()
        expect(clicked).to_have_url(re.compile(rf"/runs/{trained.info.run_id}"), timeout=60_000)
        expect(clicked.get_by_text("Model registry").first).to_be_visible(timeout=60_000)
        expect(clicked.get_by_text("Judges", exact=True)).to_have_count(0)
        # (the Assistant's button stays in the corner; its open panel is the chat box)
        expect(clicked.get_by_placeholder("Ask a question...")).to_have_count(0)
        clicked.goto(f"{stack.mlflow_url}/#/models/vidtx-ui-test/versions/1")
        expect(clicked.get_by_text("GFLOPs per view").first).to_be_visible(timeout=60_000)
        expect(clicked.get_by_text("Model registry").first).to_be_visible()
        assert "`" not in clicked.inner_text("body")  # the version's description renders plainly
        browser.close()

    started = stack.processes()
    stopped = ui_sh(stack.env, "stop")
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    _, alive = psutil.wait_procs(started, timeout=30)
    assert not alive, [process.name() for process in alive]
    assert not any(listening(port) for port in stack.ports)


def test_each_run_form_fits_on_two_screens_and_opens_with_what_a_person_changes(stack: Stack) -> None:
    """Deployments -> Run -> Custom run in the new UI (under /v2, where Prefect's root goes), at
    1400x900: the config file (required, the deployment's), the flow's few settings (empty: the
    file's), the overrides; no type tabs of None, no raw backticks, at most two screens high (was
    10,914 px for train-model, 13,946 px for sweep-model)."""
    from playwright.sync_api import expect, sync_playwright

    assert CHROMIUM, "Debian's chromium is needed: apt-get install chromium"
    heights = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        for deployment, summary, fields in FORMS:
            form = browser.new_page(viewport={"width": 1400, "height": 900})
            form.goto(f"{stack.prefect_url}/v2/deployments/deployment/{stack.deployment_id(deployment)}/run")
            expect(form.get_by_text(summary).first).to_be_visible(timeout=60_000)
            for field in fields:
                expect(form.get_by_text(re.compile(rf"^{field}( \(Optional\))?$")).first).to_be_visible()
            expect(form.get_by_text("Overrides (Optional)", exact=True)).to_have_count(1)
            expect(form.get_by_text('Property is type "None"')).to_have_count(0)
            assert "`" not in form.inner_text("body")
            if "Config File" in fields:
                expect(form.get_by_text("Config File (Optional)", exact=True)).to_have_count(0)
                expect(form.get_by_label("Config File", exact=True)).to_have_value(re.compile(r"configs/"))
                expect(form.get_by_label(f"{fields[1]} (Optional)", exact=True)).to_have_value("")
            heights[deployment] = form.evaluate("document.documentElement.scrollHeight")
            form.close()
        browser.close()
    assert max(heights.values()) <= TWO_SCREENS, heights


def test_a_run_whose_worker_was_killed_is_crashed_and_frees_the_training_slot(
    stack: Stack, tmp_path: Path
) -> None:
    """Kill the worker and everything below it mid-training, start the UIs again: the dead run is
    Crashed, its MLflow run ends KILLED, and a new `train-model` run (concurrency limit 1) trains."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment as run
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from vidtx.shard.synthetic import generate_dataset
    from vidtx.stages.shard import shard_dataset

    config = pipeline_config(tmp_path / "run", stack.env["MLFLOW_DB"])
    generate_dataset(config.synth)
    shard_dataset(config.shard)
    config.data.shards = config.shard.output
    long_run = config.model_copy(deep=True)
    long_run.train.max_steps = 100_000
    with temporary_settings({PREFECT_API_URL: f"{stack.prefect_url}/api"}):
        doomed = run("train-model/local", parameters=settings(long_run, tmp_path / "long"), timeout=0)
        tracking = MlflowClient(f"sqlite:///{stack.env['MLFLOW_DB']}")
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not tracking.search_runs(
            [e.experiment_id for e in tracking.search_experiments()], "metrics.`train/loss` > 0"
        ):
            time.sleep(2)
        worker = psutil.Process(int((stack.state / "prefect-worker.pid").read_text()))
        for process in [worker, *worker.children(recursive=True)]:  # a crash: nothing is told
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        assert ui_sh(stack.env, "stop").returncode == 0
        restarted = ui_sh(stack.env, "start")
        assert restarted.returncode == 0, restarted.stderr[-3000:]
        assert "marked Crashed" in restarted.stdout
        with get_client(sync_client=True) as client:
            assert client.read_flow_run(doomed.id).state_name == "Crashed"
        run_deployment(stack, "train-model/local", settings(config, tmp_path))
    runs = {
        r.info.run_name: r
        for r in tracking.search_runs([e.experiment_id for e in tracking.search_experiments()])
    }
    assert runs[f"demo-{doomed.id}"].info.status == "KILLED"  # ended by the next training's start


def test_a_training_cancelled_in_the_ui_ends_cancelled_with_vidtx_line(stack: Stack, tmp_path: Path) -> None:
    """Cancel a `train-model` run from its page, as a person does: Cancel, Confirm. The run and its
    task run end Cancelled (none Crashed), the log says what vidtx stopped, the MLflow run is KILLED."""
    from playwright.sync_api import expect, sync_playwright
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.deployments import run_deployment as run
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from vidtx.shard.synthetic import generate_dataset
    from vidtx.stages.shard import shard_dataset

    config = pipeline_config(tmp_path / "run", stack.env["MLFLOW_DB"])
    generate_dataset(config.synth)
    shard_dataset(config.shard)
    config.data.shards = config.shard.output
    config.train.max_steps = 100_000
    tracking = MlflowClient(f"sqlite:///{stack.env['MLFLOW_DB']}")
    with temporary_settings({PREFECT_API_URL: f"{stack.prefect_url}/api"}):
        training = run(
            "train-model/local",
            parameters=settings(config, tmp_path),
            timeout=0,
        )
        deadline = time.monotonic() + 600
        while not tracking.search_runs(
            [e.experiment_id for e in tracking.search_experiments()], "metrics.`train/loss` > 0"
        ):
            assert time.monotonic() < deadline, "training logged no step"
            time.sleep(2)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page()
            page.goto(f"{stack.prefect_url}/runs/flow-run/{training.id}")
            page.get_by_role("button", name="Cancel", exact=True).click()
            page.get_by_role("button", name="Confirm").click()
            expect(page.get_by_text("Cancelled", exact=True).first).to_be_visible(timeout=180_000)
            page.get_by_text("Task Runs", exact=True).first.click()
            expect(page.get_by_text("(1 Cancelled)")).to_be_visible(timeout=60_000)
            browser.close()
        with get_client(sync_client=True) as client:
            states = [state.name for state in client.read_flow_run_states(training.id)]
            (task_run,) = client.read_task_runs()
            logs = [
                log.message
                for log in client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[training.id])))
            ]
    (mlflow_run,) = tracking.search_runs([e.experiment_id for e in tracking.search_experiments()])
    assert "Crashed" not in states
    assert states[-2:] == ["Cancelling", "Cancelled"]
    assert task_run.state.is_cancelled()
    stopped = f"training demo-{training.id} stopped: Ray shut down, MLflow run {mlflow_run.info.run_id} ended KILLED"
    assert any(line.startswith(f"cancelled: {stopped}") for line in logs)
    assert mlflow_run.info.status == "KILLED"


def test_a_sweep_run_from_the_ui_ends_its_log_with_the_trials_the_best_and_the_version(
    stack: Stack, tmp_path: Path
) -> None:
    """A sweep started as the UI's Run button does: its flow run's own log (not only the worker's
    file) ends with each trial's values and metric with its MLflow run, the best trial, the version
    registered and the sweep in MLflow; the same as the run's artifact."""
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    from vidtx.shard.synthetic import generate_dataset
    from vidtx.stages.shard import shard_dataset

    config = pipeline_config(tmp_path / "run", stack.env["MLFLOW_DB"])
    generate_dataset(config.synth)
    shard_dataset(config.shard)
    config.data.shards = config.shard.output
    config.sweep.space = {"train.optimizer.lr": {"grid": [1e-3, 3e-3]}}
    config.sweep.num_trials = 1
    config.sweep.scheduler.name = "none"
    config.train.cpus_per_worker = 0.99  # 2 workers and the trial's driver in 2 CPUs
    config.train.val_every = 3
    config.tracking.ui_url = stack.mlflow_url  # the links vidtx writes open this stack's MLflow UI
    flow_run_id = run_deployment(stack, "sweep-model/local", settings(config, tmp_path))
    # The flow run's process ships its log records to the API in batches, the last ones as it exits,
    # which may be after its Completed state is in: read until the engine's last record has arrived.
    deadline = time.monotonic() + 60
    with stack.prefect() as client:
        while True:
            logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
            ended = any(
                log.task_run_id is None and log.message.startswith("Finished in state") for log in logs
            )
            if ended or time.monotonic() > deadline:
                break
            time.sleep(1)
    lines = [log.message for log in sorted(logs, key=lambda log: log.timestamp)]
    ours = lines[lines.index(next(line for line in lines if line.startswith("sweep "))) :]
    assert re.fullmatch(r"sweep \S+: 2 trials, best \S+", ours[0])
    for lr in ("0.001", "0.003"):
        assert any(
            re.fullmatch(rf"trial \S+( \(best\))?: train\.optimizer\.lr={lr}: val_top1 [\d.]+, finished at step 6; "
                         rf"{re.escape(stack.mlflow_url)}/#/experiments/\d+/runs/\w+\?workflowType=machine_learning", line)
            for line in ours
        ), ours  # fmt: skip
    assert any(line.startswith("best trial evaluated on test: top-1 ") for line in ours)
    assert any(line.startswith("registered models:/vidtx-ui-test/") for line in ours)
    assert any(line.startswith("the sweep in MLflow: ") for line in ours)
