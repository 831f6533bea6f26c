"""A detached run's supervisor (`--detach`): a detached actor that does on the cluster what
`rlrun train --ray` does from the user's machine, with the same code (`rlrun.training.ray.supervision`),
from what the registry says is left to do."""

from __future__ import annotations

import contextlib
import functools
import os
import socket
from collections.abc import Callable, Sequence

from rlrun import paths
from rlrun.registry import Registry
from rlrun.session.task import SessionTask
from rlrun.training.executor import Execution
from rlrun.training.ray.detached import DetachedActor, supervisor_label
from rlrun.training.ray.runtime import cluster_address, import_ray
from rlrun.training.ray.supervision import Supervision, SupervisionTaken


class DetachedSupervisor(DetachedActor):
    """A detached run's supervisor: a detached actor that does on the cluster what `rlrun train
    --ray` does from the user's machine (submits the session tasks, retries them, watches for frozen
    attempts, passes on a stop), so the machine that started the run may go away.

    Ray restarts it (`max_restarts=-1`) when its node or process dies, with the same arguments.
    Nothing it holds in memory matters: it reads what is left to do from the registry (the sessions
    that have not ended) and submits those again. The session tasks it had submitted end with it (Ray
    ends the workers of a dead owner); each new attempt takes the session's lease, continues from
    its newest intact snapshot (`continue_lost_attempt`: the tasks keep the lease token they were
    first handed out with, so a later token means an earlier attempt ran) and fences any older
    attempt still alive somewhere, so no frame is recorded twice. Supervision runs in a thread of
    its own, started by the constructor, which is all a restart runs."""

    thread_name = "rlrun-supervisor"

    def __init__(self, tasks: list[SessionTask], name: str, cpus: float, gpus: float) -> None:
        self._tasks, self._cpus, self._gpus = tasks, cpus, gpus
        super().__init__(name)

    def _take_over(self, name: str, *, restarted: bool) -> Callable[[], None]:
        first = self._tasks[0]
        with Registry.open(paths.task_home(first.home), first.db_url) as registry:
            took = registry.supervise_run(
                first.run_id,
                supervisor=self.where,
                host=socket.gethostname(),
                pid=os.getpid(),
                again_as=supervisor_label(name) if restarted else None,
            )
        # A restart that finds the run taken over (a resume while Ray could not place this actor)
        # or ended leaves it alone, and ends for good: two supervisors would fight over its leases.
        return (
            functools.partial(_supervise_detached, self._tasks, self._cpus, self._gpus, self.where)
            if took
            else lambda: None
        )


def _supervise_detached(tasks: list[SessionTask], cpus: float, gpus: float, where: str) -> None:
    """The supervisor's work (`until_done`): the sessions that have not ended, supervised to their
    end, and the run's end recorded. A resume that takes the run over meanwhile ends the
    supervision (`SupervisionTaken`), its attempts cancelled and the run's end left to the resume."""
    from rlrun.training.api import settle_run

    first = tasks[0]
    with Registry.open(paths.task_home(first.home), first.db_url) as registry:
        open_tasks = unfinished(registry, tasks)
    supervision = Supervision(cluster_address(), cpus, gpus, handle_signals=False, supervising_as=where)
    with contextlib.suppress(SupervisionTaken):
        execution = supervision.run(import_ray(), open_tasks, lambda event: None) if open_tasks else Execution([])
        with Registry.open(paths.task_home(first.home), first.db_url) as registry:
            settle_run(registry, first.run_id, execution)


def unfinished(registry: Registry, tasks: Sequence[SessionTask]) -> list[SessionTask]:
    """The tasks whose sessions still have work: not finished or failed, and not stopped by
    `rlrun stop` (a session preempted otherwise, by its worker's SIGTERM, was being retried)."""
    run = registry.get_run(tasks[0].run_id)
    stopped = registry.stop_requested(run.run.id)
    done = {
        s.index for s in run.sessions if s.status in ("finished", "failed") or (s.status == "preempted" and stopped)
    }
    return [t for t in tasks if t.index not in done]
