"""Submitting a training run to a remote Ray cluster as a Ray Job, and following it.

The job's working_dir carries only the resolved config; the cluster's image has vidtx installed (see
infra/). Inside the job `vidtx train config.yaml` runs the trainer against the cluster (Ray sets
RAY_ADDRESS there) and writes its `TrainResult` into the run's storage folder, where the submitter
reads it once the job has succeeded: storage that both reach (a shared file system or an object
store) is what a cluster run needs anyway, for its checkpoints.
"""

from __future__ import annotations

import asyncio
import logging
import shlex
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from ray.job_submission import JobDetails, JobStatus, JobSubmissionClient

from vidtx.config import PipelineConfig, deep_merge, dump_config
from vidtx.processes import sigterm_raises, stopped_from_outside
from vidtx.ray_session import worker_env
from vidtx.tracking.runs import connect, resolve_tracking_uri, start_or_resume_run
from vidtx.train.payload import Objective, TrainResult, storage_location
from vidtx.train.progress import ProgressCallback, follow_progress

logger = logging.getLogger(__name__)

RUN_NAME_METADATA = "vidtx.run_name"
AGENT_WAIT_S = 120.0  # how long a submission waits for the head node's job agent


class TrainingJobError(RuntimeError):
    """The Ray Job ended in a state other than SUCCEEDED."""


COMMANDS = {"classification": "train", "masked_autoencoding": "pretrain"}  # the job's `vidtx` command


def job_entrypoint(tags: Mapping[str, str], objective: Objective = "classification") -> str:
    command = ["vidtx", COMMANDS[objective], "config.yaml"]
    return shlex.join([*command, *(f"--tag={key}={value}" for key, value in tags.items())])


def submit_training_job(
    config: PipelineConfig,
    run_name: str,
    address: str,
    tags: Mapping[str, str] | None,
    progress: ProgressCallback | None,
    objective: Objective = "classification",
) -> TrainResult:
    # Creating (or finding) the MLflow run here checks the tracking store before the cluster does any
    # work; the job finds the same run by name.
    mlflow = connect(resolve_tracking_uri(config))
    run_id = start_or_resume_run(mlflow, config, run_name, tags, entry_point=COMMANDS[objective])
    client = JobSubmissionClient(address)
    in_cluster = config.for_run(run_name)
    in_cluster.train.cluster.address = None  # inside the job, Ray's own RAY_ADDRESS points at the cluster
    # the job writes its result there, so both sides must mean the same place
    in_cluster.train.storage_path = storage_location(config.train.storage_path)
    jobs = _jobs_of_run(client, run_name)
    job_id = _live_job(jobs)
    if job_id is None and (finished := _finished_result(jobs, in_cluster)):
        mlflow.set_terminated(run_id, "FINISHED")
        return finished
    job_id = job_id or _submit_run(client, config, in_cluster, tags, objective)
    try:
        with sigterm_raises(), follow_progress(mlflow, run_id, config.train.max_steps, progress):
            logs = _wait(client, job_id, echo=config.train.cluster.follow_logs)
    except BaseException as err:
        if stopped_from_outside(err):  # _wait stopped the job, whose own launcher ends the run KILLED
            err.add_note(
                f"training {run_name} stopped: Ray Job {job_id} stopped, MLflow run {run_id} ends KILLED"
            )
        raise
    status = client.get_job_status(job_id)
    if status != JobStatus.SUCCEEDED:
        message = client.get_job_info(job_id).message or ""
        tail = "\n".join(logs.splitlines()[-20:])
        raise TrainingJobError(f"Ray Job {job_id} {status.value}: {message}\n{tail}")
    try:
        return TrainResult.load(in_cluster.train.storage_path, run_name)
    except FileNotFoundError as err:
        raise TrainingJobError(
            f"Ray Job {job_id} succeeded, but its result is not readable from here ({err}): "
            "train.storage_path must be storage that this machine and the cluster both reach"
        ) from err


def _jobs_of_run(client: JobSubmissionClient, run_name: str) -> list[JobDetails]:
    """The cluster's Ray Jobs submitted for `run_name` (by any submitter: the metadata names the run)."""
    return [job for job in client.list_jobs() if (job.metadata or {}).get(RUN_NAME_METADATA) == run_name]


def _live_job(jobs: list[JobDetails]) -> str | None:
    """The Ray Job still training the run, if one is: its submitter was lost (the flow-run process
    killed, the laptop gone) while the cluster kept training. A re-run follows that job instead of
    submitting a second one that would train the same run beside it."""
    for job in jobs:
        if not job.status.is_terminal():
            logger.info(
                "Ray Job %s is still training run %s: following it",
                job.submission_id,
                job.metadata[RUN_NAME_METADATA],
            )
            return job.submission_id
    return None


def _finished_result(jobs: list[JobDetails], in_cluster: PipelineConfig) -> TrainResult | None:
    """The result of a Ray Job that already trained the run to its `max_steps`. A re-run (Prefect's
    Retry of a pipeline whose flow-run process was lost after the cluster finished training) takes it,
    instead of a new job that would resume at the last step, train nothing and hold the cluster's
    workers for about 40 s."""
    run_name, storage_path = in_cluster.train.run_name, in_cluster.train.storage_path
    if not any(job.status == JobStatus.SUCCEEDED for job in jobs):
        return None
    try:
        result = TrainResult.load(storage_path, run_name)
    except FileNotFoundError:
        return None
    if result.metrics.get("step", 0) < in_cluster.train.max_steps:
        return None  # the same run, given a longer budget: it resumes
    logger.info(
        "Ray Job for run %s already trained it to step %d: taking its result",
        run_name,
        result.metrics["step"],
    )
    return result


def _submit_run(
    client: JobSubmissionClient,
    config: PipelineConfig,
    in_cluster: PipelineConfig,
    tags: Mapping[str, str] | None,
    objective: Objective,
) -> str:
    run_name = in_cluster.train.run_name
    with tempfile.TemporaryDirectory(prefix="vidtx-job-") as workdir:
        Path(workdir, "config.yaml").write_text(dump_config(in_cluster))
        runtime_env = deep_merge(
            config.train.cluster.runtime_env, {"working_dir": workdir, "env_vars": worker_env()}
        )
        job_id = _submit(  # uploads working_dir now
            client,
            entrypoint=job_entrypoint(tags or {}, objective),
            runtime_env=runtime_env,
            submission_id=f"{run_name}-{uuid.uuid4().hex[:8]}",
            metadata={RUN_NAME_METADATA: run_name},
        )
    logger.info("submitted Ray Job %s to %s (run %s)", job_id, client.get_address(), run_name)
    return job_id


def _submit(client: JobSubmissionClient, **job: object) -> str:
    """`submit_job`, retried while a freshly started head node has no job agent yet (it answers
    "No available agent to submit job" for the first seconds after `ray start`)."""
    deadline = time.monotonic() + AGENT_WAIT_S
    while True:
        try:
            return client.submit_job(**job)
        except RuntimeError as err:
            if "No available agent" not in str(err) or time.monotonic() > deadline:
                raise
            logger.info("the cluster's job agent is not up yet; submitting again")
            time.sleep(2.0)


def _wait(client: JobSubmissionClient, job_id: str, echo: bool) -> str:
    """Stream the job's logs to stdout (when `echo`) until it ends; returns all of them.

    Stopped from outside (SIGTERM, Ctrl-C, a Prefect cancellation), it stops the job too: cancelling
    a run stops its training on the cluster."""
    try:
        if echo:

            async def tail() -> None:
                async for chunk in client.tail_job_logs(job_id):
                    sys.stdout.write(chunk)
                    sys.stdout.flush()

            asyncio.run(tail())
        while not client.get_job_status(job_id).is_terminal():  # its logs can end before its status
            time.sleep(0.5)
    except BaseException as err:
        if stopped_from_outside(err):
            logger.info("stopping Ray Job %s", job_id)
            client.stop_job(job_id)
        raise
    return client.get_job_logs(job_id)
