"""On the worker: one attempt at a session (`run_attempt`), which Ray runs again after losing it
(`MAX_RETRIES`), or after its worker was stopped (`WorkerStopped`); a retried attempt continues
from the session's newest intact snapshot (`continue_lost_attempt`)."""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Any

from rlrun import paths
from rlrun.registry import Registry
from rlrun.session import events
from rlrun.session.stopping import StopRequest, stop_on_signals
from rlrun.session.task import SessionTask
from rlrun.training.ray.mailbox import Relay

MAX_RETRIES = 8
"""How many times Ray runs a session again after losing it (worker or node death, a worker's
SIGTERM) before the driver records it failed."""


class WorkerStopped(Exception):  # not an error: the reason Ray is asked to run the task again
    """A session stopped with a snapshot because its worker was asked to (SIGTERM, a spot notice),
    not because the driver was: raised so that Ray runs the task again, which resumes it."""


def run_attempt(task: SessionTask, mailbox: Any) -> events.SessionEnded:
    """One attempt at a session, on a worker. Ray may run it again after losing it; each run takes
    the session's lease first (`rlrun.session.loop.run_session`)."""
    import ray

    from rlrun.session.loop import SessionFailed, run_session

    task = replace(task, node=ray.get_runtime_context().get_node_id()[:16])
    stop = StopRequest()
    ended: list[events.SessionEnded] = []
    with Relay(mailbox, stop) as relay, stop_on_signals(stop):

        def emit(event: events.Event) -> None:
            if isinstance(event, events.SessionEnded):
                ended.append(event)
            relay.emit(event)

        with contextlib.suppress(SessionFailed):  # recorded, and reported through `emit`
            run_session(task, emit, stop, on_lease=continue_lost_attempt)
    if ended and ended[-1].status == "preempted" and not relay.stopped_by_driver and not _stop_asked(task):
        raise WorkerStopped(
            f"session s{task.index} of run {task.run_id} was stopped on node {task.node}"
            f" (signal {stop.signal}) with a snapshot"
        )
    return ended[-1]


def _stop_asked(task: SessionTask) -> bool:
    """Whether the session stopped because `rlrun stop` asked its run to (not to be retried)."""
    with Registry.open(paths.task_home(task.home), task.db_url) as registry:
        return registry.stop_requested(task.run_id)


def continue_lost_attempt(registry: Registry, task: SessionTask, lease: int) -> SessionTask:
    """A retried attempt (its lease is not the first one taken since the task was handed out):
    continue from the session's newest intact snapshot, as `rlrun resume` would, forgetting what
    the lost attempt recorded after it, and with the run running again (a lost attempt stopped by
    SIGTERM, as Ray stops the tasks of a dead supervisor, closed its session preempted, and maybe
    the run). Writes under the lease just taken."""
    if task.lease_base is None or lease <= task.lease_base + 1:
        return task
    from rlrun.training.api import newest_intact, rewind

    home = paths.task_home(task.home)
    detail = registry.get_run(task.run_id)
    session = next(s for s in detail.sessions if s.index == task.index)
    own = [c for c in detail.checkpoints if c.session_index == task.index]
    start = newest_intact(home, task.run_id, session, own, [])
    path, sha256 = (start.path, start.sha256) if start else (task.resume_from, task.resume_sha256)
    rewind(registry, home, task.run_id, session, path)
    registry.run_again(task.run_id)
    return replace(task, attempt="retry", resume_from=path, resume_sha256=sha256)
