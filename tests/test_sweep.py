"""Sweeps: Ray Tune over the Ray Train trainer (real Ray, real DeepSpeed on CPU, the tiny preset),
MLflow parent and child runs, ASHA's early stopping, a killed sweep resumed, the best trial
registered; a bad space refused before anything starts."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import ray.tune
from mlflow import MlflowClient
from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID
from prefect.client.orchestration import get_client
from prefect.settings import PREFECT_API_URL
from training_runs import run_config

from vidtx.config import ConfigError, PipelineConfig, dump_config, load_config
from vidtx.stages.sweep import check_space, max_concurrent, param_space
from vidtx.tracking.runs import CHECKPOINT_TAG, END_REASON_TAG
from vidtx.tracking.sweeps import BEST_TRIAL_TAG, SWEEP_TAG, TRIAL_TAG
from vidtx.train.payload import RESULT_FILE

# the sweep-model flow, as a deployment's worker runs it: in a process of its own
SWEEP_MODEL_FLOW = "import sys; from flows.forms import SweepForm; from flows.sweep import sweep_model; sweep_model(SweepForm(config=sys.argv[1]))"
RAY_SESSIONS = Path("/tmp/ray")  # where a local Ray keeps each session's logs
RAY_AGENTS = {"ray::DashboardAgent", "ray::RuntimeEnvAgent"}
GOOD, BAD = (0.002, 0.003), (2.0, 4.0)  # AdamW learning rates: the bad ones blow the tiny model up


@pytest.mark.parametrize(
    ("space", "says"),
    [
        ("{train.optimizer.lrr: {loguniform: [1.0e-5, 1.0e-3]}}", "sweep: space.train.optimizer.lrr: no such setting"),
        ("{train.optimizer.lr: {loguniform: [0, 1.0e-3]}}", "sweep.space.train.optimizer.lr: loguniform: low must be above 0"),
        ("{train.optimizer.lr: {normal: [0, 1]}}", "sweep.space.train.optimizer.lr.normal: no such setting"),
        ("{train.optimizer.lr: {choice: [1], grid: [2]}}", "give exactly one of loguniform, uniform, randint, choice, grid"),
        ("{train.max_steps: {uniform: [10, 20]}}", "sweep: space.train.max_steps: 13.18"),  # not whole
        ("{train.precision: {choice: [fp32, fp8]}}", "sweep: space.train.precision: 'fp8': Input should be"),
        ("{model.options.shift_divv: {choice: [4, 8]}}", "sweep.space.model.options.shift_divv: 4: model.options:"),
        ("{model.name: {choice: [xvit_tiny, xvit_huge]}}", "sweep.space.model.name: 'xvit_huge': model.name: unknown"),
        ("{}", "sweep.space: empty"),
    ],
)  # fmt: skip
def test_a_bad_space_is_named_by_the_schema_or_the_zoo(space: str, says: str) -> None:
    with pytest.raises(ConfigError) as refused:
        check_space(load_config(None, [f"sweep.space={space}"]))
    assert says in str(refused.value)


def test_vidtx_sweep_of_a_bad_space_is_one_line_exit_2_and_starts_nothing(vidtx, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(dump_config(load_config(None, [f"workdir={tmp_path / 'run'}"])))
    done = vidtx("sweep", str(config), "--set", "sweep.space={model.options.shift_divv: {choice: [4, 8]}}")
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(
        "error: sweep.space.model.options.shift_divv: 4: model.options: xvit_tiny: unknown"
    ), line
    assert not (tmp_path / "run").exists()  # no MLflow store, no Ray results: nothing started


def test_a_grace_period_longer_than_the_training_is_one_line_naming_both(vidtx, tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(dump_config(load_config(None, [f"workdir={tmp_path / 'run'}", "train.max_steps=6"])))
    done = vidtx("sweep", str(config), "--set", "sweep.space={train.optimizer.lr: {choice: [0.001, 0.002]}}")
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: sweep.scheduler.grace_steps 20 is more than train.max_steps 6: "), line
    assert not (tmp_path / "run").exists()


def test_the_space_becomes_tunes_and_the_trials_at_once_are_what_the_cluster_fits(
    tiny_dataset: PipelineConfig,
) -> None:
    config = tiny_dataset.model_copy(deep=True)
    config.sweep = config.sweep.model_validate(
        {
            "space": {
                "train.optimizer.lr": {"loguniform": [1e-5, 1e-3]},
                "train.seed": {"randint": [1, 3]},
                "model.options.shift_div": {"choice": [4, 8]},
                "train.optimizer.weight_decay": {"grid": [0.0, 0.1]},
            }
        }
    )
    space = param_space(config.sweep.space)
    assert isinstance(space["train.optimizer.lr"], ray.tune.search.sample.Float)
    assert (space["train.seed"].lower, space["train.seed"].upper) == (1, 4)  # both ends included
    assert space["model.options.shift_div"].categories == [4, 8]
    assert space["train.optimizer.weight_decay"] == {"grid_search": [0.0, 0.1]}
    # the session's Ray has 2 CPUs: trials of 2 workers x 0.49 CPU and a driver's 0.01 fit twice
    config.train.cpus_per_worker = 0.49
    assert max_concurrent(config) == 2
    config.sweep.max_concurrent = 1
    assert max_concurrent(config) == 1
    config.sweep.max_concurrent, config.train.cpus_per_worker = None, 1.0
    with pytest.raises(ValueError, match=r"a trial needs 2.01 CPUs .* but the Ray cluster has 2 CPUs"):
        max_concurrent(config)  # not one fits: named now, rather than a trial waiting for ever
    assert max_concurrent(config, autoscaling=True) == 1  # a cluster's autoscaler may add a node


def sweep_config(tiny_dataset: PipelineConfig, tmp_path: Path) -> PipelineConfig:
    """4 trials, 2 at a time, of 8 steps (a validated checkpoint every 4), over learning rates
    given as a grid so that the good ones run first: the bad ones reach ASHA's first rung (step 4)
    after the good ones' validation loss is recorded there, so they are stopped."""
    config = run_config(tiny_dataset, tmp_path, max_steps=8, checkpoint_every=4, val_every=4)
    config.train.cpus_per_worker = 0.49  # two trials of two workers (and their drivers) in 2 CPUs
    config.train.precision = "fp32"
    config.data.num_workers = 0
    config.registry.model_name = "vidtx-sweep"
    config.sweep = config.sweep.model_validate(
        {
            "name": "lr-sweep",
            "space": {"train.optimizer.lr": {"grid": [*GOOD, *BAD]}},
            "num_trials": 1,  # one per grid point
            "max_concurrent": 2,
            "metric": "val_loss",  # continuous: no ties on a small validation split
            "mode": "min",
            "scheduler": {"name": "asha", "grace_steps": 4, "reduction_factor": 2},
        }
    )
    return config


@contextlib.contextmanager
def sweep_process(command: list[str], log: Path, **env: str) -> Iterator[subprocess.Popen]:
    """`command` running with its output in `log`, `env` added, on a local Ray of its own (beside the
    session's); killed with everything it started if the block fails."""
    env = {name: value for name, value in os.environ.items() if name != "RAY_ADDRESS"} | env
    with log.open("w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)
        try:
            yield process
        except BaseException:
            if process.poll() is None:  # (one that ended was reaped: its error is the block's to tell)
                with contextlib.suppress(psutil.NoSuchProcess):
                    driver = psutil.Process(process.pid)
                    for member in [*driver.children(recursive=True), driver]:
                        with contextlib.suppress(psutil.NoSuchProcess):
                            member.kill()
            raise


def wait_until(what: str, check, process: subprocess.Popen, log: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if process.poll() is not None:
            pytest.fail(f"the sweep ended before {what}: {log.read_text()[-3000:]}")
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}: {log.read_text()[-3000:]}"
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_api")
def test_a_sweep_stops_weak_trials_nests_them_in_mlflow_resumes_after_a_kill_and_registers_the_best(
    tiny_dataset: PipelineConfig, tmp_path: Path
) -> None:
    """`vidtx sweep` of 4 trials, 2 at a time, killed (SIGKILL to the driver) once ASHA has stopped
    the bad trials, then started again with the same name as the sweep-model flow:

    - a stopped trial's run ends KILLED with the reason and the checkpoint it kept;
    - the trials that ended before the kill are not trained again (nothing logged to their runs);
      a trial that was training resumes from its latest checkpoint as any training does (the
      killed-job test of tests/test_train.py);
    - one parent run throughout, the 4 trials' runs nested under it with their learning rates;
    - the best trial (a good learning rate) is evaluated and registered;
    - the flow's artifact is the trials table, each row linking its MLflow run and saying how it ended;
    - nothing of either sweep is left running (its local Ray, trials, Ray Train workers), and a trial
      stopped early frees its workers' CPUs for the next ones (Ray Train's placement-group cleaner
      finds this sweep's Ray although the session's runs beside it)."""
    config = sweep_config(tiny_dataset, tmp_path)
    config_file = tmp_path / "sweep.yaml"
    config_file.write_text(dump_config(config))
    store = f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"
    client = MlflowClient(store, registry_uri=store)  # (not the registry an earlier test's process set)
    storage = Path(config.train.storage_path)
    command = [sys.executable, "-m", "vidtx", "sweep", str(config_file)]

    def trial_runs() -> list:
        experiments = [e.experiment_id for e in client.search_experiments()]
        return client.search_runs(experiments, f"tags.`{TRIAL_TAG}` LIKE '%'") if experiments else []

    def training_logged(run_id: str) -> dict[str, list[tuple[int, float]]]:
        """Each training metric's (step, value) history (evaluation adds its own to the best's run)."""
        return {
            metric: sorted((point.step, point.value) for point in client.get_metric_history(run_id, metric))
            for metric in ("train/loss", "val/loss", "train/resumed_from_step")
        }

    def bad_trials_stopped() -> bool:
        return (
            sum(
                run.info.status == "KILLED" and float(run.data.params["train.optimizer.lr"]) in BAD
                for run in trial_runs()  # (a run just created may not have its params yet)
            )
            == 2
        )

    earlier_sessions = set(RAY_SESSIONS.glob("session_2*"))
    with sweep_process(command, tmp_path / "first.log") as first:
        wait_until("the bad trials were stopped early", bad_trials_stopped, first, tmp_path / "first.log")
        # the local Ray, the trials and their training go with the driver; Ray's two agents wait for
        # its dead GCS for about a minute, then end themselves
        started = [
            p for p in psutil.Process(first.pid).children(recursive=True) if p.name() not in RAY_AGENTS
        ]
        first.send_signal(signal.SIGKILL)
        first.wait()
    _, alive = psutil.wait_procs(started, timeout=30)
    assert not alive, [p.name() for p in alive]
    # as the kill left them: every trial had ended (the bad ones start when the good ones end), some
    # perhaps after Tune last saved its state; resumed, none may train again
    ended = {run.info.run_name: training_logged(run.info.run_id) for run in trial_runs()}
    assert len(ended) == 4
    assert all((storage / name / RESULT_FILE).exists() for name in ended)

    resume = [sys.executable, "-c", SWEEP_MODEL_FLOW, str(config_file)]
    with sweep_process(resume, tmp_path / "second.log", PREFECT_API_URL=PREFECT_API_URL.value()) as second:
        spawned: dict[int, psutil.Process] = {}
        while second.poll() is None:  # every process of the second sweep, to check that none outlives it
            with contextlib.suppress(psutil.NoSuchProcess):
                spawned |= {child.pid: child for child in psutil.Process(second.pid).children(recursive=True)}
            time.sleep(1)
    output = (tmp_path / "second.log").read_text()
    assert second.returncode == 0, output[-3000:]
    # no credential in a trial's runtime env (Ray Tune copies them in; its runtime-env agent logs it)
    sweep_logs = [
        f
        for d in set(RAY_SESSIONS.glob("session_2*")) - earlier_sessions
        for f in d.rglob("*")
        if f.is_file()
    ]
    assert len(sweep_logs) > 10
    secret = os.environ["AWS_SECRET_ACCESS_KEY"].encode()  # the session's S3 secret (conftest)
    assert not [f for f in sweep_logs if secret in f.read_bytes()]
    _, alive = psutil.wait_procs(list(spawned.values()), timeout=30)
    assert not alive, [p.name() for p in alive]

    runs = {run.info.run_name: run for run in trial_runs()}
    (parent,) = [
        run
        for run in client.search_runs(
            [e.experiment_id for e in client.search_experiments()], f"tags.`{SWEEP_TAG}` = 'lr-sweep'"
        )
        if TRIAL_TAG not in run.data.tags
    ]
    assert parent.info.status == "FINISHED"
    assert len(runs) == 4
    assert {run.data.tags[MLFLOW_PARENT_RUN_ID] for run in runs.values()} == {parent.info.run_id}
    assert sorted(float(run.data.params["train.optimizer.lr"]) for run in runs.values()) == sorted(
        [*GOOD, *BAD]
    )
    stopped = [
        run
        for run in runs.values()
        if float(run.data.params["train.optimizer.lr"]) in BAD and run.info.status == "KILLED"
    ]
    assert stopped
    for run in stopped:
        assert run.data.tags[END_REASON_TAG].startswith(
            "stopped early by the sweep's asha scheduler at step"
        ), run.data.tags
        assert Path(run.data.tags[CHECKPOINT_TAG]).is_dir()
    for name, logged in ended.items():  # not trained again: what its training logged is as it was
        assert training_logged(runs[name].info.run_id) == logged, name
        assert runs[name].info.status in ("FINISHED", "KILLED")
    best = runs[parent.data.tags[BEST_TRIAL_TAG]]
    assert float(best.data.params["train.optimizer.lr"]) in GOOD
    (version,) = client.search_model_versions("name = 'vidtx-sweep'")
    assert version.run_id == best.info.run_id
    with get_client(sync_client=True) as prefect:
        (artifact,) = [a for a in prefect.read_artifacts() if a.key == "sweep-trials"]
    assert artifact.data.startswith("# Sweep `lr-sweep`")
    for run in runs.values():  # each trial's row links its MLflow run
        assert f"[{run.info.run_name}](http://127.0.0.1:5000/#/experiments/" in artifact.data
        assert f"/runs/{run.info.run_id}?workflowType=machine_learning)" in artifact.data
    for run in runs.values():  # and says how it ended
        (row,) = [line for line in artifact.data.splitlines() if f"[{run.info.run_name}]" in line]
        stopped_early = run.data.tags.get(END_REASON_TAG, "").startswith("stopped early")
        assert ("| stopped early |" in row) == stopped_early, row
