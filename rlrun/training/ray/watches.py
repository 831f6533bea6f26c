"""What the driver watches while its sessions run: the cluster (`ClusterWatch`: lost once no node
can run a session for the liveness limit), each attempt (`AttemptWatch`: presumed lost when silent
in the registry that long while Ray sees its worker alive; `rlrun stop`; a detached supervisor's
run taken over), and how each session's task ended (`task_outcome`, recorded when Ray gave up on it)."""

from __future__ import annotations

import time
from typing import Any

from rlrun import paths
from rlrun.errors import ClusterLost, RegistryError
from rlrun.registry import CRASHED, Registry, stale_after_seconds
from rlrun.session import events
from rlrun.session.task import SessionTask
from rlrun.training.ray.mailbox import POLL_SECONDS
from rlrun.training.ray.preflight import can_host
from rlrun.training.ray.worker import MAX_RETRIES, WorkerStopped

CLUSTER_CHECK_SECONDS = 1.0
"""How often the driver asks the cluster whether a node that can run a session is still there."""


class ClusterWatch:
    """Whether the cluster can still run the sessions: lost once no live node that fits a session
    (`can_host`) has been seen for the liveness limit (every node gone, or the cluster itself cut off
    from this driver), when Ray would otherwise wait for one for ever."""

    def __init__(self, cpus: float, gpus: float) -> None:
        self.cpus, self.gpus = cpus, gpus
        self.seen = time.monotonic()
        self.checked = 0.0
        self.why = "no node that can run a session"

    def lost(self, ray: Any) -> str | None:
        now = time.monotonic()
        if now - self.checked < CLUSTER_CHECK_SECONDS:
            return self._judged(now)
        self.checked = now
        try:
            fits = any(n.get("Alive") and can_host(n.get("Resources", {}), self.cpus, self.gpus) for n in ray.nodes())
        except Exception as error:
            self.unreachable(error)
            return self._judged(now)
        if fits:
            self.seen = now
        else:
            self.why = "no node that can run a session"
        return self._judged(now)

    def unreachable(self, error: BaseException) -> None:
        self.why = f"the cluster did not answer ({type(error).__name__}: {error})"
        time.sleep(POLL_SECONDS)  # asked again at the next check

    def _judged(self, now: float) -> str | None:
        silent = now - self.seen
        return f"{self.why} for {silent:.0f} s" if silent >= stale_after_seconds() else None


def cluster_lost(address: str, why: str, open_tasks: list[SessionTask]) -> ClusterLost:
    """Record each session still open preempted, not failed (its snapshots stand; `rlrun resume`
    continues it), and say so."""
    run_id = open_tasks[0].run_id if open_tasks else "?"
    for task in open_tasks:
        _recorded_end(task, f"its Ray cluster was lost: {why}", status="preempted")
    return ClusterLost(
        f"the Ray cluster was lost ({why}); run {run_id} keeps its snapshots: continue it with"
        f" `rlrun resume {run_id} --ray {address}` once the cluster is back"
    )


class AttemptWatch:
    """Presumes an attempt lost that Ray cannot see is: its worker alive to Ray (frozen, or on a
    node cut off from the registry) but silent in the registry for longer than the liveness rule
    allows (`stale_after_seconds()`, by the database's clock; `rlrun ls` says crashed by then too).
    Ray sees dead workers and nodes itself, and its retry takes the lease long before that."""

    def __init__(self, task: SessionTask, supervising_as: str | None = None) -> None:
        self.registry = Registry.open(paths.task_home(task.home), task.db_url)
        self.run_id = task.run_id
        self.checked = self.asked_at = 0.0
        self.presumed: dict[int, int] = {}  # session id -> the lease presumed lost, until a retry takes over
        self.supervising_as = supervising_as
        self.taken_over = False
        """A detached supervisor's run no longer names it (`supervising_as`): a resume took it over."""

    def stop_asked(self) -> bool:
        """Whether `rlrun stop` asked the run to stop, looked up once a second. The sessions read
        it with their heartbeat too; the supervisor reads it so that it retries none of them, and
        passes it on at once (through the mailbox). A detached supervisor also learns here
        whether a resume took the run over (`taken_over`)."""
        import time

        if time.monotonic() - self.asked_at < 1.0:
            return False
        self.asked_at = time.monotonic()
        try:
            if self.supervising_as is not None:
                self.taken_over = self.registry.supervisor_of(self.run_id) != self.supervising_as
            return self.registry.stop_requested(self.run_id)
        except RegistryError:
            return False  # out for longer than its retries: look again next round

    def __enter__(self) -> AttemptWatch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.registry.close()

    def lost(self, pending: dict[Any, SessionTask]) -> list[Any]:
        import time

        from rlrun.registry import stale_after_seconds

        if time.monotonic() - self.checked < 1.0:
            return []
        self.checked = time.monotonic()
        found: list[Any] = []
        for ref, task in pending.items():
            try:
                lease, silent = self.registry.silence(task.session_id)
            except RegistryError:
                return found  # the registry is out for longer than its retries: look again next round
            started = task.lease_base is not None and lease > task.lease_base
            if (
                started
                and silent is not None
                and silent > stale_after_seconds()
                and self.presumed.get(task.session_id) != lease
            ):
                self.presumed[task.session_id] = lease
                found.append(ref)
        return found


def task_outcome(ray: Any, ref: Any, task: SessionTask) -> events.SessionEnded:
    """How a session's task ended. Ray gave up on it (every retry lost, or the task could not be
    placed): the session is recorded failed, unless it ended on its own before that."""
    from ray.exceptions import RayError, RayTaskError

    try:
        ended: events.SessionEnded = ray.get(ref)
        return ended
    except RayTaskError as error:
        cause = error.cause if isinstance(getattr(error, "cause", None), BaseException) else error
        if isinstance(cause, WorkerStopped):
            return _recorded_end(task, f"stopped on its worker {MAX_RETRIES + 1} times: {cause}")
        return _recorded_end(task, f"{type(cause).__name__}: {cause}")
    except RayError as error:
        detail = (str(error).strip().splitlines() or [type(error).__name__])[0]
        return _recorded_end(task, f"lost on the cluster after {MAX_RETRIES} retries: {detail}")


def _recorded_end(task: SessionTask, message: str, status: str = "failed") -> events.SessionEnded:
    with Registry.open(paths.task_home(task.home), task.db_url) as registry:
        session = registry.get_session(task.run_id, task.index)
        if session.status in ("pending", "running", CRASHED):  # not ended (crashed: as read, silent a while)
            registry.finish_session(
                session.id,
                status=status,
                frame=session.frame,
                episode=session.episode,
                opt_step=session.opt_step,
                error=message,
            )
            return events.SessionEnded(task.index, status, session.frame, session.best_eval, message)
        return events.SessionEnded(task.index, session.status, session.frame, session.best_eval, session.error)
