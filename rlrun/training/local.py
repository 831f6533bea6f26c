"""The local executor: one session runs in this process; several run in one process each (forked
from a zygote, or spawned: `rlrun.training.zygote`), started, stopped and reaped by the supervisor
(`rlrun.training.supervisor`).

The first SIGINT/SIGTERM asks every session to stop at its next step with a snapshot; a second one
ends at once. A session process that dies without saying how it ended is recorded as failed. `run`
returns only when every process it started has ended and been reaped.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path

from rlrun import paths
from rlrun.registry import Registry
from rlrun.session import events
from rlrun.session.stopping import StopRequest, stop_on_signals
from rlrun.session.task import SessionTask
from rlrun.training import zygote
from rlrun.training.executor import Execution, OnEvent
from rlrun.training.supervisor import Supervisor, Work


class LocalExecutor:
    def __init__(self, *, handle_signals: bool = True, stop: StopRequest | None = None) -> None:
        self.handle_signals = handle_signals
        """False: leave signal handling to the caller (outside the main thread it is left anyway)."""
        self.stop = stop
        """A stop the caller may request for reasons of its own, from its `on_event` (a search pruning
        a trial): the sessions stop at their next step with a snapshot, as after a signal."""

    def prepare(self, home: Path, db_url: str, *, modules: Sequence[str] = ()) -> None:
        """Only the start method to check (before the run is recorded): the sessions run on this
        machine, beside the home, and import the modules as this process did (multiprocessing hands
        them its `sys.path`)."""
        zygote.wanted_start_method(os.environ)

    def close(self) -> None:
        """Nothing taken."""

    def run(self, tasks: Sequence[SessionTask], on_event: OnEvent) -> Execution:
        stop = self.stop or StopRequest()
        if len(tasks) == 1:
            signals = stop_on_signals(stop) if self.handle_signals else contextlib.nullcontext()
            with signals:
                ended = [_run_here(tasks[0], on_event, stop)]
            return Execution(ended, stop.signal)
        return _run_in_processes(list(tasks), on_event, stop, self.handle_signals)


def _run_here(task: SessionTask, on_event: OnEvent, stop: StopRequest) -> events.SessionEnded:
    from rlrun.session.loop import SessionFailed, run_session

    ended: list[events.SessionEnded] = []

    def forward(event: events.Event) -> None:
        if isinstance(event, events.SessionEnded):
            ended.append(event)
        on_event(event)

    with contextlib.suppress(SessionFailed):  # already recorded, and reported through `forward`
        run_session(task, forward, stop)
    return ended[-1]


def _run_in_processes(
    tasks: list[SessionTask], on_event: OnEvent, stop: StopRequest, handle_signals: bool
) -> Execution:
    """Every session in a process of its own, all at once."""
    from rlrun.session.loop import run_session_process

    by_index = {t.index: t for t in tasks}
    ended: dict[int, events.SessionEnded] = {}

    def deliver(index: int, event: events.Event) -> bool:
        if isinstance(event, events.SessionEnded):
            ended[index] = event
        on_event(event)
        return isinstance(event, events.SessionEnded)

    def record_silent_death(index: int, exitcode: int | None) -> None:
        message = f"session process exited with code {exitcode} without reporting"
        deliver(index, _record_failed(by_index[index], message))

    supervisor = Supervisor(deliver, record_silent_death, at_most=len(tasks), stop=stop, handle_signals=handle_signals)
    signal = supervisor.run(Work(t.index, run_session_process, (t,), name=f"rlrun-s{t.index}") for t in tasks)
    return Execution([ended[t.index] for t in tasks], signal)


def _record_failed(task: SessionTask, message: str) -> events.SessionEnded:
    """Record as failed a session whose process could not: its end, as the session would have said it."""
    with Registry.open(paths.task_home(task.home), task.db_url) as registry:
        session = registry.get_session(task.run_id, task.index)
        registry.finish_session(
            session.id,
            status="failed",
            frame=session.frame,
            episode=session.episode,
            opt_step=session.opt_step,
            error=message,
        )
    return events.SessionEnded(task.index, "failed", session.frame, session.best_eval, message)
