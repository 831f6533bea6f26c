"""The local executor: one session runs in this process; several run in one spawned process each
(spawn, not fork: torch and SQLite connections do not survive a fork).

The first SIGINT/SIGTERM asks every session to stop at its next step with a snapshot (a stop
request is one integer, shared with the session processes); a second one ends at once. Events come
back through a queue; a process that dies without saying so is recorded as failed. `run` returns
only when every process it started has ended and been reaped.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue as queue_module
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlrun.registry import Registry
from rlrun.session import events
from rlrun.session.stopping import StopRequest, stop_on_signals
from rlrun.training.executor import Execution, OnEvent

if TYPE_CHECKING:
    from rlrun.session.loop import SessionTask

LAST_WORDS_SECONDS = 2.0
"""How long a dead session process's last events may still be on their way through the queue."""


class LocalExecutor:
    def __init__(self, *, handle_signals: bool = True, stop: StopRequest | None = None) -> None:
        self.handle_signals = handle_signals
        """False: leave signal handling to the caller (outside the main thread it is left anyway)."""
        self.stop = stop
        """A stop the caller may request for reasons of its own, from its `on_event` (a search pruning
        a trial): the sessions stop at their next step with a snapshot, as after a signal."""

    def prepare(self, home: Path, db_url: str, *, modules: Sequence[str] = ()) -> None:
        """Nothing to check: the sessions run on this machine, beside the home, and import the
        modules as this process did (multiprocessing's spawn hands them its `sys.path`)."""

    def close(self) -> None:
        """Nothing taken."""

    def run(self, tasks: Sequence[SessionTask], on_event: OnEvent) -> Execution:
        if len(tasks) == 1:
            stop = self.stop or StopRequest()
            with self._signals(stop):
                ended = [_run_here(tasks[0], on_event, stop)]
            return Execution(ended, stop.signal)
        return _run_spawned(list(tasks), on_event, self._signals, self.stop)

    def _signals(self, stop: StopRequest, on_abort: Any = None) -> contextlib.AbstractContextManager[Any]:
        if not self.handle_signals:
            return contextlib.nullcontext(stop)
        return stop_on_signals(stop, on_abort) if on_abort else stop_on_signals(stop)


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


def _run_spawned(tasks: list[SessionTask], on_event: OnEvent, signals: Any,
                 outside: StopRequest | None = None) -> Execution:
    execution = _supervise(tasks, on_event, signals, outside)
    stop_resource_tracker()
    return execution


def _supervise(tasks: list[SessionTask], on_event: OnEvent, signals: Any,
               outside: StopRequest | None = None) -> Execution:
    """Start the session processes and relay their events until each has ended; a stop requested
    on `outside` is passed on to them. Every multiprocessing object lives and dies inside this call
    (see `stop_resource_tracker`)."""
    from rlrun.session.loop import run_session_process

    context = multiprocessing.get_context("spawn")
    channel = context.Queue()
    stop = StopRequest(context.Value("i", 0))
    processes = {t.index: context.Process(target=run_session_process, args=(t, channel, stop.shareable()),
                                          name=f"rlrun-s{t.index}") for t in tasks}

    def abort() -> None:
        for process in processes.values():
            if process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, 9)

    ended: dict[int, events.SessionEnded] = {}
    try:
        with signals(stop, abort):
            for process in processes.values():
                process.start()
            while len(ended) < len(tasks):
                if outside is not None and outside.signal and not stop.signal:
                    stop.request(outside.signal)
                try:
                    event = channel.get(timeout=0.5)
                except queue_module.Empty:
                    _reap_silent_deaths(tasks, processes, ended, channel, on_event)
                    continue
                _deliver(event, ended, on_event)
            for process in processes.values():
                process.join()
    finally:
        channel.close()
        channel.join_thread()  # the queue's feeder thread
    return Execution([ended[t.index] for t in tasks], stop.signal)


def stop_resource_tracker() -> None:
    """Spawn starts multiprocessing's resource tracker, a helper process that otherwise lives until
    the interpreter exits, so a caller waiting for this command's children would find one still
    alive. Stopped here, once the semaphores it tracks are released (the queue's and the stop
    request's: collected now, so the tracker finds none to clean up and says nothing)."""
    import gc
    from multiprocessing import resource_tracker

    gc.collect()
    stop_tracker = getattr(resource_tracker._resource_tracker, "_stop", None)  # private; absent: ends at exit
    if stop_tracker is not None:
        with contextlib.suppress(Exception):
            stop_tracker()


def _deliver(event: events.Event, ended: dict[int, events.SessionEnded], on_event: OnEvent) -> None:
    if isinstance(event, events.SessionEnded):
        ended[event.index] = event
    on_event(event)


def _reap_silent_deaths(tasks: list[SessionTask], processes: dict[int, Any], ended: dict[int, events.SessionEnded],
                        channel: Any, on_event: OnEvent) -> None:
    dead = [t for t in tasks if t.index not in ended and not processes[t.index].is_alive()]
    if not dead:
        return
    deadline = time.monotonic() + LAST_WORDS_SECONDS
    while time.monotonic() < deadline:
        try:
            _deliver(channel.get(timeout=0.1), ended, on_event)
        except queue_module.Empty:
            break
    for task in dead:
        if task.index in ended:
            continue
        message = f"session process exited with code {processes[task.index].exitcode} without reporting"
        with Registry.open(Path(task.home), task.db_url) as registry:
            session = registry.get_session(task.run_id, task.index)
            registry.finish_session(session.id, status="failed", frame=session.frame, episode=session.episode,
                                    opt_step=session.opt_step, error=message)
        _deliver(events.SessionEnded(task.index, "failed", session.frame, session.best_eval, message), ended,
                 on_event)
