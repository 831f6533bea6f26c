"""What runs in a SLURM job: one attempt at one session (`SessionJob`), which submitit calls in
the job's Python process, and again each time SLURM runs the job again after a requeue.

The session trains in a thread; the main thread keeps the signals. SIGTERM or SIGINT (SLURM
preempting, requeueing or cancelling the job) asks the session to stop at its next step with a
snapshot. USR2 reaches submitit's handler, which calls `checkpoint`: the same stop, awaited, then
the job handed back to submitit to requeue. Each attempt takes the session's lease; one that is not
the first since the job was submitted continues from the newest intact snapshot (`continued`)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from rlrun import paths
from rlrun.registry import Registry
from rlrun.session import events
from rlrun.session.stopping import StopRequest
from rlrun.session.task import SessionTask

JOIN_SECONDS = 0.2
"""How often the main thread looks up from waiting for the session (signals are taken between)."""


class SessionJob:
    """A session's job as submitit pickles it: the task alone (plain data, with the lease token it
    was submitted under); what an attempt holds at run time is not kept (`__getstate__`)."""

    def __init__(self, task: SessionTask) -> None:
        self.task = task
        self._stop: StopRequest | None = None
        self._thread: threading.Thread | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"task": self.task}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["task"])  # type: ignore[misc]

    def __call__(self) -> str:
        """Train the session until it ends or is stopped, then settle the run; its status."""
        ended: list[events.SessionEnded] = []
        self._stop = StopRequest()
        if _stop_asked(self.task):  # `rlrun stop` while the job waited in the queue: a snapshot, at once
            self._stop.request(signal.SIGTERM)
        self._thread = threading.Thread(target=self._attempt, args=(ended,), name="rlrun-session")
        with _stopping_on_signals(self._stop):
            self._thread.start()
            while self._thread.is_alive():
                self._thread.join(JOIN_SECONDS)
        return _settled(self.task, ended)

    def checkpoint(self) -> Any:
        """submitit's call on USR2 (the time limit is near, or a preemption's notice): stop the
        session with a snapshot, wait for it, and return the job to requeue (None: not to, when the
        session ended anyway or `rlrun stop` asked it to)."""
        import submitit

        if self._stop is not None and self._thread is not None:
            self._stop.request(signal.SIGUSR2)
            self._thread.join()
        if not _continues(self.task):
            return None
        return submitit.helpers.DelayedSubmission(SessionJob(self.task))

    def _attempt(self, ended: list[events.SessionEnded]) -> None:
        from rlrun.session.loop import SessionFailed, run_session

        assert self._stop is not None
        task = replace(self.task, node=socket.gethostname())

        def keep(event: events.Event) -> None:
            if isinstance(event, events.SessionEnded):
                ended.append(event)

        with contextlib.suppress(SessionFailed):  # recorded by the session
            run_session(task, keep, self._stop, on_lease=continued)


def continued(registry: Registry, task: SessionTask, lease: int) -> SessionTask:
    """A job SLURM runs again continues its session from the newest intact snapshot, as a retried
    Ray task does (the same rule, `continue_lost_attempt`), recorded as an attempt of kind "requeue"."""
    from rlrun.training.ray.worker import continue_lost_attempt

    again = continue_lost_attempt(registry, task, lease)
    return again if again is task else replace(again, attempt="requeue")


@contextlib.contextmanager
def _stopping_on_signals(stop: StopRequest) -> Iterator[None]:
    """SIGTERM/SIGINT ask the session to stop with a snapshot; repeats change nothing (SLURM may
    signal every process of the job, and then kill it after its KillWait)."""

    def handle(signum: int, frame: Any) -> None:
        if not stop.signal:
            stop.request(signum)

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _continues(task: SessionTask) -> bool:
    """Whether the session has work left that a requeue should do: not ended for good, and no
    `rlrun stop` asked of its run."""
    with Registry.open(paths.task_home(task.home), task.db_url) as registry:
        session = registry.get_session(task.run_id, task.index)
        return session.status not in ("finished", "failed") and not registry.stop_requested(task.run_id)


def _stop_asked(task: SessionTask) -> bool:
    with Registry.open(paths.task_home(task.home), task.db_url) as registry:
        return registry.stop_requested(task.run_id)


def _settled(task: SessionTask, ended: list[events.SessionEnded]) -> str:
    """Record the run's end when this was its last session to end (as a local run's launcher does)."""
    from rlrun.training.api import settle_run
    from rlrun.training.executor import Execution

    with Registry.open(paths.task_home(task.home), task.db_url) as registry:
        settle_run(registry, task.run_id, Execution(ended))
    status = ended[-1].status if ended else "not run"
    print(f"rlrun: session s{task.index} of run {task.run_id}: {status} (pid {os.getpid()})", flush=True)
    return status
