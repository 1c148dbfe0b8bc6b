"""A cancelled training ends Cancelled all the way up, with vidtx's line on what it stopped.

While vidtx trains, it holds SIGTERM itself (`vidtx.processes.sigterm_raises`): the stop must unwind
a blocking Ray call, shut the local Ray down and end the MLflow run KILLED. So when the worker asks
the flow-run process to cancel, Prefect's SIGTERM bridge is not the handler in place and the request
is not acknowledged; the stop then reaches Prefect's engine as a bare `TerminationSignal`, which it
records as a crash: the task run stayed Crashed, and so did the flow run until the worker marked it
Cancelled, with no word of what had been stopped.

`cancellable` runs a task's function so that a stop asked for by a cancel (this flow run, or the run
at its root, is Cancelling) returns a Cancelled state carrying what the work said it left behind
(`vidtx.processes.what_stopped`). A flow that gets such a state returns `cancelled(state)`: a
subflow hands a Cancelled state with the same message to its parent; the root run logs the message
and unwinds as Prefect unwinds a run whose worker's cancel request was acknowledged, so the worker
ends it Cancelled without a crash or a traceback. A SIGTERM that no cancel asked for (a node going
away) is still Prefect's crash.
"""

from __future__ import annotations

import functools
import signal
from collections.abc import Callable
from typing import ParamSpec, TypeVar
from uuid import UUID

from prefect import get_client, get_run_logger
from prefect._internal.control_listener import _set_intent
from prefect.client.schemas.objects import State
from prefect.exceptions import TerminationSignal
from prefect.runtime import flow_run
from prefect.states import Cancelled

from vidtx.processes import stopped_from_outside, what_stopped

P = ParamSpec("P")
R = TypeVar("R")


def cancel_requested() -> bool:
    """Whether this flow run, or the run at its root, is being cancelled (or was). An API that does
    not answer says no: the stop then stays what it was, rather than becoming that API's error."""
    run_ids = {flow_run.id, flow_run.root_flow_run_id} - {None}
    try:
        with get_client(sync_client=True) as client:
            states = [client.read_flow_run(UUID(str(run_id))).state for run_id in run_ids]
    except Exception as err:
        get_run_logger().warning("could not tell whether the run was cancelled: %s", err)
        return False
    return any(state is not None and (state.is_cancelling() or state.is_cancelled()) for state in states)


def cancellable(task_function: Callable[P, R]) -> Callable[P, R | State]:
    """`task_function`, returning a Cancelled state when a cancel stops it (see the module's docstring)."""

    @functools.wraps(task_function)
    def run(*args: P.args, **kwargs: P.kwargs) -> R | State:
        try:
            return task_function(*args, **kwargs)
        except BaseException as err:
            if not (stopped_from_outside(err) and cancel_requested()):
                raise
            return Cancelled(message=what_stopped(err))

    return run


def cancelled(state: State) -> State:
    """What a flow returns when the `state` of its work is Cancelled; the state's message (vidtx's line)
    goes in its log first.

    A subflow: a Cancelled state with that message, for its parent. The root run does not return: it
    unwinds with the worker's cancel request marked as acknowledged (the intent Prefect's control
    channel would have recorded had its bridge been in place when the request came; a private
    function of Prefect 3.9, which `tests/test_cancel.py` notices when it changes)."""
    message = state.message or "cancelled"
    get_run_logger().warning("cancelled: %s", message)
    if flow_run.parent_flow_run_id is not None:
        return Cancelled(message=message)
    _set_intent("cancel")
    raise TerminationSignal(signal.SIGTERM)
