"""The driver: `RayExecutor` connects to the cluster as a job that ships the user's modules, runs
the pre-flight, submits each session as a Ray task and supervises them to their end (retries,
attempts presumed lost, stop requests, a lost cluster), from this process or, with `detach`, from
a detached supervisor on the cluster (`rlrun.training.ray.run_supervisor`), by the same code
(`rlrun.training.ray.supervision`)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rlrun.errors import ClusterUnreachable
from rlrun.session.stopping import StopRequest
from rlrun.session.task import SessionTask
from rlrun.training.executor import Execution, OnEvent
from rlrun.training.ray.detached import check_supervisor_placement, detached_name, start_detached
from rlrun.training.ray.preflight import check_reachable, check_storage, shipped_modules
from rlrun.training.ray.runtime import ADDRESS_ENV, cluster_address, import_ray
from rlrun.training.ray.supervision import Supervision, lease_of


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
        self.address = cluster_address(address)
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
                return self._supervision().run(ray, list(tasks), on_event)
            finally:
                self.close()

    def _detach(self, ray: Any, tasks: list[SessionTask]) -> Execution:
        """Start the run's supervisor, a detached actor that Ray restarts wherever it can when its
        node dies, and wait until it has taken the run over (recorded itself as its supervisor)."""
        from rlrun.training.ray.run_supervisor import DetachedSupervisor  # built on this module: imported on use

        handed_out = [replace(t, lease_base=lease_of(t)) for t in tasks]  # once: a restart gets the same
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

    def _supervision(self) -> Supervision:
        return Supervision(self.address, self.cpus, self.gpus, handle_signals=self.handle_signals, stop=self.stop)


@contextlib.contextmanager
def _without_ray_notices() -> Iterator[None]:
    """Ray's driver prints the cluster's notices (a task failed and is retried, with its traceback; a
    node's raylet died) on sys.stdout from a thread of its own. stdout is `--json`'s alone, and
    what they tell is what rlrun reports in its own terms (retries, attempts, a lost cluster), so
    while connected they are dropped here (Ray keeps them in its session logs on the cluster)."""
    with open(os.devnull, "w") as nowhere, contextlib.redirect_stdout(nowhere):
        yield


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
