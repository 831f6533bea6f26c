"""The driver: `RayExecutor` connects to the cluster as a job that ships the user's modules, runs
the pre-flight, submits each session as a Ray task and supervises them to their end (retries,
attempts presumed lost, stop requests, a lost cluster), from this process or, with `detach`, from
a detached supervisor on the cluster (`rlrun.training.ray.run_supervisor`), by the same code."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rlrun import paths
from rlrun.errors import ClusterUnreachable
from rlrun.registry import Registry
from rlrun.session import events
from rlrun.session.stopping import StopRequest, stop_on_signals
from rlrun.session.task import SessionTask
from rlrun.training.executor import Execution, OnEvent
from rlrun.training.ray.detached import check_supervisor_placement, detached_name, start_detached
from rlrun.training.ray.mailbox import POLL_SECONDS, Mailbox, relay_events
from rlrun.training.ray.preflight import check_reachable, check_storage, shipped_modules
from rlrun.training.ray.runtime import forwarded_environment, import_ray
from rlrun.training.ray.watches import AttemptWatch, ClusterWatch, cluster_lost, task_outcome
from rlrun.training.ray.worker import MAX_RETRIES, WorkerStopped, run_attempt

ADDRESS_ENV = "RLRUN_RAY_ADDRESS"


class SupervisionTaken(Exception):  # not an error: a detached supervisor's cue to leave
    """A resume took over the run that a detached supervisor was supervising."""


class RayExecutor:
    def __init__(
        self,
        address: str | None = None,
        *,
        cpus: float = 1.0,
        gpus: float = 0.0,
        handle_signals: bool = True,
        stop: StopRequest | None = None,
        detach: bool = False,
        supervisor_on: str | None = None,
    ) -> None:
        import_ray()  # a missing extra is said at once, before the spec is even loaded
        self.address = address or os.environ.get(ADDRESS_ENV) or "auto"
        self.cpus, self.gpus = cpus, gpus
        self.handle_signals = handle_signals
        self.detach = detach
        """Hand the sessions' supervision to a detached actor on the cluster (`DetachedSupervisor`)
        and return once it has taken over, instead of supervising them from this process."""
        self.supervisor_on = supervisor_on
        """With `detach`: the custom Ray resource of the nodes the supervisor may run on (None:
        any node), so that it lives on on-demand nodes while the sessions take spot ones."""
        self.stop = stop
        """A stop the caller may request for reasons of its own (a search pruning a trial), as the
        local executor's: the sessions stop at their next step with a snapshot and are not retried."""
        self.supervising_as: str | None = None
        """Set in a detached supervisor: its label, which the run's record must keep naming (a
        resume that takes the run over ends the supervision, `SupervisionTaken`)."""
        self._connected_here = False
        self._shipped: list[str] | None = None
        """The local paths of the user's modules that `prepare` found to ship with the job (None:
        not prepared yet)."""

    # -- before anything is written ---------------------------------------------------------------

    def prepare(self, home: Path, db_url: str, *, modules: Sequence[str] = ()) -> None:
        """Connect to the cluster and check that every node that may run a session sees the runs
        home (and a SQLite registry) and imports the user's `modules`: BadInput naming the node and
        the path or module if one does not."""
        shipped = shipped_modules(modules)  # before connecting: a module that cannot be shipped is said at once
        self._shipped = shipped
        ray = import_ray()
        with _without_ray_notices():
            self._connect(ray, shipped)
            try:
                check_storage(ray, home, db_url, self.cpus, self.gpus, modules=list(modules), every_node=self.detach)
                if self.detach and self.supervisor_on is not None:
                    check_supervisor_placement(ray, self.supervisor_on)
            except BaseException:
                self.close()
                raise

    def _connect(self, ray: Any, shipped: list[str]) -> None:
        """Connect this process to the cluster as a job that ships the user's modules (`shipped`).
        A connection made before (by the caller) is used as it is: the storage check then finds
        whether its workers import the modules."""
        if ray.is_initialized():
            return
        check_reachable(self.address)
        import logging

        try:
            ray.init(
                address=self.address,
                logging_level=logging.ERROR,
                log_to_driver=False,
                configure_logging=True,
                runtime_env={"py_modules": shipped} if shipped else None,
            )
        except (ConnectionError, RuntimeError, ValueError) as error:
            # Ray's first sentence only: the rest is its own advice (`--address`, RAY_ADDRESS), which
            # rlrun's line gives in rlrun's terms.
            detail = (str(error).strip().splitlines() or [type(error).__name__])[0].split(". ")[0].rstrip(".")
            raise ClusterUnreachable(
                f"no Ray cluster at --ray {self.address}: {detail}; start one with"
                " `ray start --head` or give its address"
                f" (--ray HOST:PORT or ${ADDRESS_ENV})"
            ) from None
        self._connected_here = True

    def close(self) -> None:
        if self._connected_here:
            import ray

            ray.shutdown()
            self._connected_here = False

    # -- running ----------------------------------------------------------------------------------

    def run(self, tasks: Sequence[SessionTask], on_event: OnEvent) -> Execution:
        if self._shipped is None:
            raise RuntimeError("RayExecutor.run before prepare: prepare finds the user's modules to ship")
        ray = import_ray()
        with _without_ray_notices():
            self._connect(ray, self._shipped)  # connected already by `prepare`, unless `close` came between
            try:
                if self.detach:
                    return self._detach(ray, list(tasks))
                return self._supervise(ray, list(tasks), on_event)
            finally:
                self.close()

    def _detach(self, ray: Any, tasks: list[SessionTask]) -> Execution:
        """Start the run's supervisor, a detached actor that Ray restarts wherever it can when its
        node dies, and wait until it has taken the run over (recorded itself as its supervisor)."""
        from rlrun.training.ray.run_supervisor import DetachedSupervisor  # built on this module: imported on use

        handed_out = [replace(t, lease_base=_lease_of(t)) for t in tasks]  # once: a restart gets the same
        name = detached_name(tasks[0].run_id)
        args = (handed_out, name, self.cpus, self.gpus)
        where = start_detached(
            ray,
            DetachedSupervisor,
            name,
            self.supervisor_on,
            args,
            what="the run's supervisor",
            again=f"continue the run with `rlrun resume {tasks[0].run_id} --ray`",
        )
        return Execution([], 0, supervisor=where)

    def _supervise(self, ray: Any, tasks: list[SessionTask], on_event: OnEvent) -> Execution:
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
        handed_out = [t if t.lease_base is not None else replace(t, lease_base=_lease_of(t)) for t in tasks]
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


@contextlib.contextmanager
def _without_ray_notices() -> Iterator[None]:
    """Ray's driver prints the cluster's notices (a task failed and is retried, with its traceback; a
    node's raylet died) on sys.stdout from a thread of its own. stdout is `--json`'s alone, and
    what they tell is what rlrun reports in its own terms (retries, attempts, a lost cluster), so
    while connected they are dropped here (Ray keeps them in its session logs on the cluster)."""
    with open(os.devnull, "w") as nowhere, contextlib.redirect_stdout(nowhere):
        yield


def _lease_of(task: SessionTask) -> int:
    with Registry.open(paths.task_home(task.home), task.db_url) as registry:
        return registry.get_session(task.run_id, task.index).lease


def ray_executor(
    address: str | None,
    *,
    cpus: float | None = None,
    gpus: float | None = None,
    handle_signals: bool = True,
    stop: StopRequest | None = None,
    detach: bool = False,
    supervisor_on: str | None = None,
) -> RayExecutor:
    """The executor `--ray [ADDRESS]` asks for (ADDRESS: $RLRUN_RAY_ADDRESS, else "auto"); with
    `detach` (`--detach`), the run's supervision is handed to the cluster, on the nodes that offer
    the resource `supervisor_on` (`--supervisor-on`) when given."""
    return RayExecutor(
        address,
        cpus=1.0 if cpus is None else cpus,
        gpus=0.0 if gpus is None else gpus,
        handle_signals=handle_signals,
        stop=stop,
        detach=detach,
        supervisor_on=supervisor_on,
    )


@dataclass(frozen=True)
class RayTrials:
    """Each search trial's executor on a Ray cluster (`rlrun search --ray`), given the stop its
    pruner requests. Plain data, so that trials trained at once (`--parallel K`) each make theirs in
    their worker process (`for_worker`: signals are then the driver's to forward), every worker a
    driver of the same cluster."""

    address: str | None
    cpus: float | None = None
    gpus: float | None = None
    handle_signals: bool = True

    def __call__(self, stop: StopRequest) -> RayExecutor:
        return ray_executor(self.address, cpus=self.cpus, gpus=self.gpus, handle_signals=self.handle_signals, stop=stop)

    def for_worker(self) -> RayTrials:
        return replace(self, handle_signals=False)
