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
from demo_config import shrunk_demo_config
from mlflow import MlflowClient
from ui_stack import Stack, listening, started_stack, ui_sh

from flows.pipeline import VideoPipelineConfig
from vidtx.config import PipelineConfig
from vidtx.tracking.links import run_link
from vidtx.tracking.runs import connect, resolve_tracking_uri

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("VIDTX_CHROMIUM") or shutil.which("chromium")
DEPLOYED_FLOWS = [
    *("shard-dataset", "train-model", "evaluate-model", "register-model", "video-pipeline", "sweep-model"),
]
RUN_SECTIONS = ["Data", "Model", "Train", "Tracking", "Storage"]
# (deployment, its form's summary, sections shown, sections not shown)
FORMS = [
    (
        "train-model/local",
        "One training run",
        RUN_SECTIONS,
        ["Synth", "Shard", "Eval", "Registry", "Predict", "Sweep"],
    ),
    (
        "evaluate-model/local",
        "Multi-view evaluation",
        [*RUN_SECTIONS, "Eval"],
        ["Synth", "Shard", "Registry", "Predict", "Sweep"],
    ),
    (
        "register-model/local",
        "A trained model into",
        [*RUN_SECTIONS, "Eval", "Registry"],
        ["Synth", "Shard", "Predict", "Sweep"],
    ),
    (
        "sweep-model/local",
        "A hyperparameter sweep",
        [*RUN_SECTIONS, "Eval", "Registry", "Sweep"],
        ["Synth", "Shard", "Predict"],
    ),
    (
        "video-pipeline/demo",
        "The whole pipeline",
        [*RUN_SECTIONS, "Synth", "Shard", "Eval", "Registry"],
        ["Predict", "Sweep"],
    ),
]

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


def pipeline_config(tmp_path: Path, mlflow_db: str) -> PipelineConfig:
    """The shrunk demo pipeline, logging to the UI's MLflow store."""
    return shrunk_demo_config(
        tmp_path, f"tracking.tracking_uri=sqlite:///{mlflow_db}", "registry.model_name=vidtx-ui-test"
    )


def train_parameters(config: PipelineConfig) -> dict:
    """train-model's `config` parameter: the sections it reads."""
    from flows.train import TrainModelConfig

    return TrainModelConfig.model_validate(config).model_dump(mode="json")


def run_deployment(stack: Stack, name: str, parameters: dict) -> str:
    """Run a deployment through the server `ui.sh` started, as the UI's Run button does; the flow run
    id once the run is final (the worker that `ui.sh` started runs it)."""
    from prefect.deployments import run_deployment as run
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: f"{stack.prefect_url}/api"}):
        flow_run = run(name, parameters=parameters, timeout=900)
    assert flow_run.state is not None
    assert flow_run.state.is_completed(), flow_run.state
    return str(flow_run.id)


def test_the_uis_show_deployments_runs_and_the_champion_and_ui_stop_leaves_nothing(
    stack: Stack, tmp_path: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright

    assert CHROMIUM, "Debian's chromium is needed: apt-get install chromium"
    config = pipeline_config(tmp_path / "run", stack.env["MLFLOW_DB"])
    config.tracking.ui_url = stack.mlflow_url  # the links vidtx writes open this stack's MLflow UI
    shard_run = run_deployment(
        stack,
        "shard-dataset/local",
        {"shard": config.shard.model_dump(mode="json"), "synth": config.synth.model_dump(mode="json")},
    )
    run_deployment(
        stack,
        "video-pipeline/demo",
        {"config": VideoPipelineConfig.model_validate(config).model_dump(mode="json")},
    )

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(f"{stack.prefect_url}/deployments")
        for flow in DEPLOYED_FLOWS:
            expect(page.get_by_text(flow, exact=True).first).to_be_visible(timeout=60_000)
        # each flow's run form shows the sections that flow reads, and says what it is
        for deployment, summary, shown, hidden in FORMS:
            form = browser.new_page()  # a fresh page, as a person opening Deployments -> Run -> Custom run
            form.goto(f"{stack.prefect_url}/v2/deployments/deployment/{stack.deployment_id(deployment)}/run")
            expect(form.get_by_text(summary).first).to_be_visible(timeout=60_000)
            for section in shown:
                expect(form.get_by_text(f"{section} (Optional)", exact=True).first).to_be_visible()
            for section in hidden:
                expect(form.get_by_text(f"{section} (Optional)", exact=True)).to_have_count(0)
            if deployment != "video-pipeline/demo":  # described as what it is, not the pipeline
                expect(form.get_by_text("the whole pipeline")).to_have_count(0)
            form.close()
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
        browser.close()

    started = stack.processes()
    stopped = ui_sh(stack.env, "stop")
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    _, alive = psutil.wait_procs(started, timeout=30)
    assert not alive, [process.name() for process in alive]
    assert not any(listening(port) for port in stack.ports)


def test_train_models_run_form_in_the_ui_prefects_root_opens_reads_plainly(stack: Stack) -> None:
    """train-model/local -> Run -> Custom run in the new UI (under /v2, where Prefect's root goes), as a
    newcomer reads it: sections and fields by name, not class; no type tabs of None, no raw backticks;
    a nullable value an empty input, a dict its default; shorter than the 9,178 px it was."""
    from playwright.sync_api import expect, sync_playwright

    assert CHROMIUM, "Debian's chromium is needed: apt-get install chromium"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        form = browser.new_page(viewport={"width": 1280, "height": 900})
        form.goto(stack.prefect_url)
        expect(form).to_have_url(re.compile(r"/v2/"), timeout=60_000)
        deployment = stack.deployment_id("train-model/local")
        form.goto(f"{stack.prefect_url}/v2/deployments/deployment/{deployment}/run")
        expect(form.get_by_text("One training run").first).to_be_visible(timeout=60_000)
        for section in [*RUN_SECTIONS, "Cluster", "Optimizer", "Schedule"]:
            expect(form.get_by_text(f"{section} (Optional)", exact=True)).to_have_count(1)
        expect(form.locator("label").filter(has_text=re.compile(r"Config\b"))).to_have_count(0)
        expect(form.get_by_text('Property is type "None"')).to_have_count(0)
        assert "`" not in form.inner_text("body")
        # a nullable value empty (None), the deployment's value, a default
        expect(form.get_by_label("Global Batch Size (Optional)", exact=True)).to_have_value("")
        expect(form.get_by_label("Max Steps (Optional)", exact=True)).to_have_value("1200")
        expect(form.get_by_label("Cache GB (Optional)", exact=True)).to_have_value("50")
        for name in ["Options", "Runtime Env", "DeepSpeed"]:  # a dict: a JSON editor holding its default
            label = form.get_by_text(f"{name} (Optional)", exact=True)
            expect(form.locator("div.group", has=label).last.locator(".cm-content")).to_have_text("{}")
        height = form.evaluate("document.documentElement.scrollHeight")
        assert height < 9_000, height  # 9,178 px before vidtx.config.sections shaped the schema, 8,640 after
        browser.close()


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
        doomed = run("train-model/local", parameters={"config": train_parameters(long_run)}, timeout=0)
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
        run_deployment(stack, "train-model/local", {"config": train_parameters(config)})
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
            parameters={"config": train_parameters(config)},
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
