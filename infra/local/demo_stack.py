"""`make demo-stack`: the demo pipeline across the services of `make stack`, as a team runs it.

    python -m infra.local.demo_stack [--set KEY=VALUE ...] [--no-wait]

With the stack's env file and ports (no other setting): the synthetic sources of configs/experiments/stack.yaml are
generated here and uploaded to the bucket (shard.source's folder), the `video-pipeline/stack`
deployment (prefect.yaml) is deployed to the stack's Prefect server and run through its API with that
config (shard.ray_address: the stack's GCS), and the stack's worker picks it up: shards written by Ray
tasks into the bucket, training as a Ray Job on both nodes, evaluation, registration on the MLflow
server. Prints the flow run (its id first, for scripts), then waits for it and prints its summary.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from pathlib import Path
from uuid import UUID

from infra.local.stack import BIN, ROOT, Stack
from vidtx import storage
from vidtx.config import PipelineConfig, load_config
from vidtx.shard.synthetic import generate_dataset
from vidtx.storage import parent_of

STACK_CONFIG = ROOT / "configs" / "experiments" / "stack.yaml"
DEPLOYMENT = "video-pipeline/stack"


def read_env_file(path: Path) -> dict[str, str]:
    """The `export NAME=VALUE` lines of the stack's env file."""
    if not path.exists():
        raise SystemExit(f"no stack at {path.parent}: run `make stack` first")
    lines = path.read_text().splitlines()
    return dict(line.removeprefix("export ").split("=", 1) for line in lines if line.strip())


def stack_overrides(stack: Stack, overrides: list[str]) -> list[str]:
    """What configs/experiments/stack.yaml needs to point at this stack's GCS, then `overrides`."""
    return [f"shard.ray_address=127.0.0.1:{stack.settings()['ports']['ray_gcs']}", *overrides]


def upload_sources(config: PipelineConfig) -> None:
    """Generate the synthetic dataset here (kept for the next time) and upload it where shard.source is."""
    assert config.synth is not None, "the stack config names the sources to generate in `synth`"
    annotations = config.synth.output / "annotations.csv"
    local = annotations if annotations.is_file() else generate_dataset(config.synth)
    storage.upload(local.parent, parent_of(config.shard.source))
    print(f"sources: {local.parent} uploaded to {parent_of(config.shard.source)}")


def trigger(overrides: list[str]) -> str:
    """Deploy video-pipeline/stack and run it on configs/experiments/stack.yaml with `overrides` (less
    `synth`: the sources are uploaded already) through the Prefect API."""
    from prefect.deployments import run_deployment

    deploy = [str(BIN / "prefect"), "--no-prompt", "deploy", "--prefect-file", "prefect.yaml",
              "--name", DEPLOYMENT]  # fmt: skip
    deployed = subprocess.run(deploy, cwd=ROOT, capture_output=True, text=True)
    if deployed.returncode != 0:
        raise SystemExit(
            f"prefect deploy {DEPLOYMENT} failed:\n{deployed.stdout[-2000:]}{deployed.stderr[-2000:]}"
        )
    settings = {"config": str(STACK_CONFIG.relative_to(ROOT)), "overrides": [*overrides, "synth=null"]}
    flow_run = run_deployment(DEPLOYMENT, parameters={"settings": settings}, timeout=0)
    return str(flow_run.id)


def wait_and_report(flow_run_id: str) -> bool:
    """Wait for the flow run to end; print its final state and summary artifact. Whether it Completed."""
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey
    from prefect.flow_runs import wait_for_flow_run

    flow_run = asyncio.run(wait_for_flow_run(UUID(flow_run_id), timeout=7200, log_states=True))
    print(f"flow run {flow_run.name}: {flow_run.state_name} ({flow_run.state.message or ''})")
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run.id]),
                key=ArtifactFilterKey(any_=["pipeline-summary"]),
            )
        )
    for artifact in artifacts:
        print(artifact.data)
    return flow_run.state.is_completed()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m infra.local.demo_stack", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--no-wait", action="store_true", help="print the flow run's id and return")
    args = parser.parse_args(argv)
    stack = Stack(Path(os.environ.get("VIDTX_STACK_DIR", ROOT / "runs" / "stack")))
    os.environ.update(read_env_file(stack.folder / "stack.env"))  # before Prefect reads its settings
    overrides = stack_overrides(stack, args.overrides)
    config = load_config(STACK_CONFIG, overrides)
    storage.configure(config.storage.endpoint_url, config.storage.region)
    upload_sources(config)
    flow_run_id = trigger(overrides)
    from flows.lineage import flow_run_link  # Prefect, once the stack's settings are in the environment

    print(flow_run_id)
    print(f"flow run on {flow_run_link(str(flow_run_id))}")
    if not args.no_wait and not wait_and_report(flow_run_id):
        sys.exit(1)


if __name__ == "__main__":
    main()
