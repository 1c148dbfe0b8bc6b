"""The flow runs in flight on a Prefect server, when `make ui` stops, or when a worker of `make ui` or
`make stack` starts again.

`cancel` (ui.sh stop, before the worker is stopped): cancel every pending or running flow run and wait
until they have ended. Cancelling through the API is what makes the process worker stop a flow-run
process (SIGTERM), which unwinds its training (the local Ray shut down, the MLflow run ended KILLED)
and leaves the run Cancelled, not Running for ever.

`crash-orphans` (ui.sh start, before the worker starts): runs of the local work pool still pending,
running or cancelling have no process any more (everything `make ui` started was stopped, or the
machine went down): they are marked Crashed, which also frees their concurrency slot at once instead
of when its lease expires (up to 5 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import time

from prefect.client.orchestration import PrefectClient, get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateType,
    WorkPoolFilter,
    WorkPoolFilterName,
)
from prefect.client.schemas.objects import FlowRun, StateType
from prefect.states import Cancelling, Crashed

IN_FLIGHT = FlowRunFilter(
    state=FlowRunFilterState(
        type=FlowRunFilterStateType(any_=[StateType.PENDING, StateType.RUNNING, StateType.CANCELLING])
    )
)


async def in_flight(client: PrefectClient, work_pool: str) -> list[FlowRun]:
    return await client.read_flow_runs(
        flow_run_filter=IN_FLIGHT, work_pool_filter=WorkPoolFilter(name=WorkPoolFilterName(any_=[work_pool]))
    )


async def cancel(work_pool: str, timeout: float) -> None:
    """Cancel the pool's flow runs in flight; wait up to `timeout` s for them to end."""
    async with get_client() as client:
        runs = await in_flight(client, work_pool)
        for run in runs:
            if run.state_type is not StateType.CANCELLING:
                await client.set_flow_run_state(
                    run.id, Cancelling(message="stopped by make ui-stop"), force=True
                )
            print(f"cancelling flow run {run.name} ({run.id})")
        deadline = time.monotonic() + timeout
        while runs and time.monotonic() < deadline:
            await asyncio.sleep(2)
            runs = [
                run
                for run in [await client.read_flow_run(run.id) for run in runs]
                if not run.state.is_final()
            ]
        for run in runs:
            print(f"flow run {run.name} ({run.id}) is still {run.state_name} after {timeout:g} s")


async def crash_orphans(work_pool: str) -> None:
    """Mark the pool's flow runs in flight Crashed: no worker is running them."""
    async with get_client() as client:
        for run in await in_flight(client, work_pool):
            message = f"its process was gone when the {work_pool} worker started again"
            await client.set_flow_run_state(run.id, Crashed(message=message), force=True)
            print(f"flow run {run.name} ({run.id}) was {run.state_name} with no process: marked Crashed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["cancel", "crash-orphans"])
    parser.add_argument("--work-pool", default="vidtx-process")
    parser.add_argument(
        "--timeout", type=float, default=90.0, help="cancel: seconds to wait for the runs to end"
    )
    args = parser.parse_args()
    if args.action == "cancel":
        asyncio.run(cancel(args.work_pool, args.timeout))
    else:
        asyncio.run(crash_orphans(args.work_pool))


if __name__ == "__main__":
    main()
