"""Supervising a run's session tasks on a Ray cluster to their end (retries, attempts presumed
lost, stop requests, a lost cluster): what `rlrun train --ray` does from the user's machine
(`rlrun.training.ray.executor`) and a detached run's supervisor does on the cluster
(`rlrun.training.ray.run_supervisor`), by this same code."""

from __future__ import annotations

import contextlib
import signal
from dataclasses import dataclass, replace
from typing import Any

from rlrun import paths
from rlrun.registry import Registry
from rlrun.session import events
from rlrun.session.stopping import StopRequest, stop_on_signals
from rlrun.session.task import SessionTask
from rlrun.training.executor import Execution, OnEvent
from rlrun.training.ray.mailbox import POLL_SECONDS, Mailbox, relay_events
from rlrun.training.ray.runtime import forwarded_environment
from rlrun.training.ray.watches import AttemptWatch, ClusterWatch, cluster_lost, task_outcome
from rlrun.training.ray.worker import MAX_RETRIES, WorkerStopped, run_attempt


class SupervisionTaken(Exception):  # not an error: a detached supervisor's cue to leave
    """A resume took over the run that a detached supervisor was supervising."""


@dataclass(frozen=True)
class Supervision:
    """How a run's sessions are supervised: the cluster's `address` (said when it is lost), each
    task's `cpus` and `gpus`, whether a SIGINT/SIGTERM here stops them (`handle_signals`), a stop
    the caller may request for reasons of its own (`stop`), and, in a detached supervisor, its label,
    which the run's record must keep naming (`supervising_as`)."""

    address: str
    cpus: float
    gpus: float
    handle_signals: bool = True
    stop: StopRequest | None = None
    supervising_as: str | None = None

    def run(self, ray: Any, tasks: list[SessionTask], on_event: OnEvent) -> Execution:
        """Submit each session's task and watch them to their end; SupervisionTaken in a detached
        supervisor whose run a resume took over."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from rlrun.session.loop import SUPERSEDED

        here = ray.get_runtime_context().get_node_id()
        mailbox = (
            ray.remote(num_cpus=0)(Mailbox)
            .options(scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False))
            .remote()
        )
        attempt = ray.remote(run_attempt).options(
            num_cpus=self.cpus,
            num_gpus=self.gpus,
            max_retries=MAX_RETRIES,
            retry_exceptions=[WorkerStopped],
            runtime_env={"env_vars": forwarded_environment()},
        )
        # A detached supervisor's tasks come with theirs, taken when they were first handed out.
        handed_out = [t if t.lease_base is not None else replace(t, lease_base=lease_of(t)) for t in tasks]
        pending = {attempt.remote(t, mailbox): t for t in handed_out}
        watch = AttemptWatch(tasks[0], self.supervising_as)
        cluster = ClusterWatch(self.cpus, self.gpus)
        stop = self.stop or StopRequest()
        ended: dict[int, events.SessionEnded] = {}
        abandoned: dict[Any, SessionTask] = {}  # attempts presumed lost, which Ray may still run

        def abort() -> None:
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True, recursive=True)

        signals = stop_on_signals(stop, abort) if self.handle_signals else contextlib.nullcontext(stop)
        asked = 0
        lost: str | None = None
        with signals, watch:
            while pending:
                if not asked and (lost := cluster.lost(ray)) is not None:
                    pending.update(abandoned)  # none may start when nodes come back: resume continues them
                    abort()
                    break
                try:
                    ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_SECONDS)
                except Exception as error:  # the driver lost its connection to the cluster
                    cluster.unreachable(error)
                    continue
                if not stop.signal and watch.stop_asked():
                    stop.request(signal.SIGTERM)  # `rlrun stop`: as a SIGTERM to a driver would
                if watch.taken_over:
                    abort()
                    with contextlib.suppress(Exception):
                        ray.kill(mailbox)
                    raise SupervisionTaken(tasks[0].run_id)
                if stop.signal and not asked:
                    asked = stop.signal
                    mailbox.request_stop.remote(asked)
                relay_events(ray, mailbox, on_event)
                for ref in ready:
                    task = pending.pop(ref)
                    outcome = task_outcome(ray, ref, task)
                    revived = [r for r, t in abandoned.items() if t.index == task.index]
                    if outcome.status == SUPERSEDED and revived:
                        # An attempt presumed lost came back (Ray retried it after all) and took
                        # the lease: that one trains the session now, so watch it instead.
                        pending.update((r, abandoned.pop(r)) for r in revived)
                        continue
                    ended[task.index] = outcome
                    relay_events(ray, mailbox, on_event)
                    on_event(ended[task.index])
                if not asked:
                    for ref in watch.lost(pending):
                        # Abandoned, not cancelled: a frozen worker cannot be reached, and when it
                        # wakes its lease is taken, so it writes nothing (see the package's note).
                        task = pending.pop(ref)
                        abandoned[ref] = task
                        pending[attempt.remote(task, mailbox)] = task
        with contextlib.suppress(Exception):
            ray.kill(mailbox)
        if lost is not None:
            raise cluster_lost(self.address, lost, [t for t in tasks if t.index not in ended])
        return Execution([ended[t.index] for t in tasks], stop.signal)


def lease_of(task: SessionTask) -> int:
    """The session's lease token as the task is handed out: a later one means an earlier attempt ran."""
    with Registry.open(paths.task_home(task.home), task.db_url) as registry:
        return registry.get_session(task.run_id, task.index).lease
