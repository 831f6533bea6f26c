"""The cluster executor: each session runs as a Ray task (one CPU by default), placed by Ray, and
survives the loss of its worker or node.

Ray runs a task at least once: when a session's worker process or node dies, Ray runs the task
again elsewhere. The retried attempt looks up its own durable state (Ray's habit): it takes the
session's lease (a fencing token in the registry), sees from the token that an earlier attempt ran,
and continues from the session's newest snapshot that passes the deep check, as `rlrun resume` would
(`rlrun.training.api.newest_intact` and `rewind`), recorded as an attempt of kind "retry". An older
attempt that is still alive somewhere (a frozen worker, a partitioned node) finds its lease taken at
its next write and stops without writing anything (`rlrun.registry.database.LeaseLost`).

The user's own env code (the modules `env.id` and `env.packages` name) reaches the workers through
Ray's runtime environment: each module that is not installed on this machine (found in the current
directory or on PYTHONPATH) is shipped as `py_modules` of the job (Ray uploads local folders only for
a whole job, given to `ray.init`), its package folder or its file, so a worker imports it as the
driver does; an installed one must be installed on every node, like rlrun itself.
The storage check imports them on every node before anything is written.

A SIGTERM to a session's worker (a spot notice) stops that session at its next step with a
snapshot, recorded preempted; the task then raises `WorkerStopped`, which Ray retries like a lost
worker. A SIGINT/SIGTERM to this process (the driver), or `rlrun stop` (a request in the registry
that the sessions read with their heartbeat and the driver once a second), asks every session to
stop the same way, and none is retried. Events and the driver's stop request travel through a
small actor on the driver's node (`Mailbox`); sessions poll it a few times a second, never per step.

With `detach` (`--detach`), what the driver does is done on the cluster instead, by the same code
(`RayExecutor._supervise`) in a detached actor (`DetachedSupervisor`) that Ray restarts wherever it
can when its node dies; `run` returns once the actor has taken the run over. A supervisor takes a
run back after a restart only while the registry still names it (`Registry.supervise_run`), and
leaves a run that a resume took over: one supervisor at a time, whoever started last.

Ray is an optional extra, imported only here, only when `--ray` is asked for.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import signal
import site
import socket
import sysconfig
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rlrun import paths, storage
from rlrun.errors import BadInput, ClusterLost, ClusterUnreachable, RegistryError, TrainingFailed, install_hint
from rlrun.registry import CRASHED, STALE_AFTER_SECONDS, Registry, sqlite_file
from rlrun.session import events
from rlrun.session.stopping import StopRequest, stop_on_signals
from rlrun.session.task import SessionTask
from rlrun.spec.env_ids import WHERE
from rlrun.training.executor import Execution, OnEvent

ADDRESS_ENV = "RLRUN_RAY_ADDRESS"
MAX_RETRIES = 8
"""How many times Ray runs a session again after losing it (worker or node death, a worker's
SIGTERM) before the driver records it failed."""
POLL_SECONDS = 0.25
"""How often a session passes its events to the driver and hears of a stop request."""
CLUSTER_CHECK_SECONDS = 1.0
"""How often the driver asks the cluster whether a node that can run a session is still there."""
PROBE_SECONDS = 60.0


def import_ray() -> Any:
    """Ray, or the one line that says how to get it."""
    try:
        import ray
    except ImportError:
        raise BadInput(f"--ray needs Ray, an optional extra that is not installed: {install_hint('ray')}") from None
    return ray


class SupervisionTaken(Exception):  # not an error: a detached supervisor's cue to leave
    """A resume took over the run that a detached supervisor was supervising."""


class WorkerStopped(Exception):  # not an error: the reason Ray is asked to run the task again
    """A session stopped with a snapshot because its worker was asked to (SIGTERM, a spot notice),
    not because the driver was: raised so that Ray runs the task again, which resumes it."""


class RayExecutor:
    def __init__(self, address: str | None = None, *, cpus: float = 1.0, gpus: float = 0.0,
                 handle_signals: bool = True, stop: StopRequest | None = None,
                 detach: bool = False, supervisor_on: str | None = None) -> None:  # fmt: skip
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
        _check_reachable(self.address)
        import logging

        try:
            ray.init(address=self.address, logging_level=logging.ERROR, log_to_driver=False, configure_logging=True,
                     runtime_env={"py_modules": shipped} if shipped else None)  # fmt: skip
        except (ConnectionError, RuntimeError, ValueError) as error:
            # Ray's first sentence only: the rest is its own advice (`--address`, RAY_ADDRESS), which
            # rlrun's line gives in rlrun's terms.
            detail = (str(error).strip().splitlines() or [type(error).__name__])[0].split(". ")[0].rstrip(".")
            raise ClusterUnreachable(f"no Ray cluster at --ray {self.address}: {detail}; start one with"
                                     " `ray start --head` or give its address"
                                     f" (--ray HOST:PORT or ${ADDRESS_ENV})") from None
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
        handed_out = [replace(t, lease_base=_lease_of(t)) for t in tasks]  # once: a restart gets the same
        name = f"rlrun-{tasks[0].run_id}-{uuid.uuid4().hex[:6]}"
        args = (handed_out, name, self.cpus, self.gpus)
        where = start_detached(ray, DetachedSupervisor, name, self.supervisor_on, args, what="the run's supervisor",
                               again=f"continue the run with `rlrun resume {tasks[0].run_id} --ray`")
        return Execution([], 0, supervisor=where)

    def _supervise(self, ray: Any, tasks: list[SessionTask], on_event: OnEvent) -> Execution:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from rlrun.session.loop import SUPERSEDED

        here = ray.get_runtime_context().get_node_id()
        mailbox = ray.remote(num_cpus=0)(Mailbox).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)).remote()
        attempt = ray.remote(run_attempt).options(
            num_cpus=self.cpus, num_gpus=self.gpus, max_retries=MAX_RETRIES, retry_exceptions=[WorkerStopped],
            runtime_env={"env_vars": forwarded_environment()})
        # A detached supervisor's tasks come with theirs, taken when they were first handed out.
        handed_out = [t if t.lease_base is not None else replace(t, lease_base=_lease_of(t)) for t in tasks]
        pending = {attempt.remote(t, mailbox): t for t in handed_out}
        watch = _Watch(tasks[0], self.supervising_as)
        cluster = _ClusterWatch(self.cpus, self.gpus)
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
                _relay(ray, mailbox, on_event)
                for ref in ready:
                    task = pending.pop(ref)
                    outcome = _outcome(ray, ref, task)
                    revived = [r for r, t in abandoned.items() if t.index == task.index]
                    if outcome.status == SUPERSEDED and revived:
                        # An attempt presumed lost came back (Ray retried it after all) and took
                        # the lease: that one trains the session now, so watch it instead.
                        pending.update((r, abandoned.pop(r)) for r in revived)
                        continue
                    ended[task.index] = outcome
                    _relay(ray, mailbox, on_event)
                    on_event(ended[task.index])
                if not asked:
                    for ref in watch.lost(pending):
                        # Abandoned, not cancelled: a frozen worker cannot be reached, and when it
                        # wakes its lease is taken, so it writes nothing (see the module's note).
                        task = pending.pop(ref)
                        abandoned[ref] = task
                        pending[attempt.remote(task, mailbox)] = task
        with contextlib.suppress(Exception):
            ray.kill(mailbox)
        if lost is not None:
            raise _cluster_lost(self.address, lost, [t for t in tasks if t.index not in ended])
        return Execution([ended[t.index] for t in tasks], stop.signal)


@contextlib.contextmanager
def _without_ray_notices() -> Iterator[None]:
    """Ray's driver prints the cluster's notices (a task failed and is retried, with its traceback; a
    node's raylet died) on sys.stdout from a thread of its own. stdout is `--json`'s alone, and
    what they tell is what rlrun reports in its own terms (retries, attempts, a lost cluster), so
    while connected they are dropped here (Ray keeps them in its session logs on the cluster)."""
    with open(os.devnull, "w") as nowhere, contextlib.redirect_stdout(nowhere):
        yield


class _ClusterWatch:
    """Whether the cluster can still run the sessions: lost once no live node that fits a session
    (`_fits`) has been seen for the liveness limit (every node gone, or the cluster itself cut off
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
            fits = any(n.get("Alive") and _fits(n.get("Resources", {}), self.cpus, self.gpus) for n in ray.nodes())
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
        return f"{self.why} for {silent:.0f} s" if silent >= STALE_AFTER_SECONDS else None


def _cluster_lost(address: str, why: str, open_tasks: list[SessionTask]) -> ClusterLost:
    """Record each session still open preempted, not failed (its snapshots stand; `rlrun resume`
    continues it), and say so."""
    run_id = open_tasks[0].run_id if open_tasks else "?"
    for task in open_tasks:
        _recorded_end(task, f"its Ray cluster was lost: {why}", status="preempted")
    return ClusterLost(f"the Ray cluster was lost ({why}); run {run_id} keeps its snapshots: continue it with"
                       f" `rlrun resume {run_id} --ray {address}` once the cluster is back")


def shipped_modules(modules: Sequence[str]) -> list[str]:
    """The local paths Ray ships to the workers for the user's `modules` (dotted names): the folder
    of each one's top-level package, or its file, unless it is installed here (in site-packages or
    the standard library), as it must then be on every node. BadInput when one cannot be shipped."""
    paths: list[str] = []
    for module in modules:
        top = module.split(".")[0]
        found = importlib.util.find_spec(top)
        if found is None:
            raise BadInput(f"{top} (named by the spec) cannot be found on this machine to ship to the Ray workers;"
                           f" {WHERE}")
        locations = list(found.submodule_search_locations or [])
        if len(locations) > 1:
            raise BadInput(f"{top} is a namespace package spread over {len(locations)} folders, which Ray cannot ship"
                           " (py_modules takes one folder); give it an __init__.py, or install it on every node")
        path = locations[0] if locations else found.origin
        if path is None or not os.path.exists(path):
            continue  # built in or frozen: part of Python itself
        if not _installed(Path(path)) and path not in paths:
            paths.append(path)
    return paths


def _installed(path: Path) -> bool:
    """Whether `path` lies in this Python's site-packages or standard library."""
    roots = [*site.getsitepackages(), site.getusersitepackages(),
             *(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib"))]
    resolved = path.resolve()
    return any(resolved.is_relative_to(Path(root).resolve()) for root in roots if root)


def forwarded_environment() -> dict[str, str]:
    """rlrun's own settings (RLRUN_TENSORBOARD, the test hooks) reach the sessions as they would
    local ones; a worker's environment is its node's, not this process's. So does OpenMP's wait
    policy (`rlrun.spec.cores.let_idle_threads_sleep`): Ray starts a fresh worker process for these
    variables, which reads it when torch loads there."""
    from rlrun.spec.cores import OPENMP_WAIT_POLICY

    return {k: v for k, v in os.environ.items()
            if (k.startswith("RLRUN_") and k not in ("RLRUN_HOME", "RLRUN_DB", storage.CACHE_ENV))
            or k == OPENMP_WAIT_POLICY}  # fmt: skip


class _Watch:
    """Presumes an attempt lost that Ray cannot see is: its worker alive to Ray (frozen, or on a
    node cut off from the registry) but silent in the registry for longer than the liveness rule
    allows (`STALE_AFTER_SECONDS`, by the database's clock; `rlrun ls` says crashed by then too).
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

    def __enter__(self) -> _Watch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.registry.close()

    def lost(self, pending: dict[Any, SessionTask]) -> list[Any]:
        import time

        from rlrun.registry import STALE_AFTER_SECONDS

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
            if started and silent is not None and silent > STALE_AFTER_SECONDS and \
                    self.presumed.get(task.session_id) != lease:  # fmt: skip
                self.presumed[task.session_id] = lease
                found.append(ref)
        return found


def _lease_of(task: SessionTask) -> int:
    with Registry.open(paths.task_home(task.home), task.db_url) as registry:
        return registry.get_session(task.run_id, task.index).lease


def _relay(ray: Any, mailbox: Any, on_event: OnEvent) -> None:
    for event in ray.get(mailbox.take.remote()):
        on_event(event)


def _outcome(ray: Any, ref: Any, task: SessionTask) -> events.SessionEnded:
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
            registry.finish_session(session.id, status=status, frame=session.frame, episode=session.episode,
                                    opt_step=session.opt_step, error=message)
            return events.SessionEnded(task.index, status, session.frame, session.best_eval, message)
        return events.SessionEnded(task.index, session.status, session.frame, session.best_eval, session.error)


class Mailbox:
    """The driver's post box, an actor on the driver's node: sessions leave their events and read
    the driver's stop request; the driver takes the events and posts the request."""

    def __init__(self) -> None:
        self.events: list[events.Event] = []
        self.stop = 0

    def post(self, batch: list[events.Event]) -> int:
        self.events.extend(batch)
        return self.stop

    def take(self) -> list[events.Event]:
        taken, self.events = self.events, []
        return taken

    def request_stop(self, signum: int) -> None:
        self.stop = signum


# ---------------------------------------------------------------------------------------------
# On the worker


class _Relay:
    """A session's side of the mailbox: a thread that posts the session's events a few times a
    second and hands the driver's stop request to the session. A mailbox gone (its driver died;
    Ray then usually ends the driver's tasks too) costs only the events: whatever still runs
    records itself in the registry, as always."""

    def __init__(self, mailbox: Any, stop: StopRequest) -> None:
        self.mailbox, self.stop = mailbox, stop
        self.stopped_by_driver = False
        self._events: list[events.Event] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rlrun-relay", daemon=True)

    def emit(self, event: events.Event) -> None:
        if isinstance(event, events.SessionEnded):
            return  # the task's result says how it ended, once, after any retry
        with self._lock:
            self._events.append(event)

    def __enter__(self) -> _Relay:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._done.set()
        self._thread.join()
        self._post()

    def _loop(self) -> None:
        while not self._done.wait(POLL_SECONDS):
            self._post()

    def _post(self) -> None:
        import ray

        with self._lock:
            batch, self._events = self._events, []
        try:
            signum = ray.get(self.mailbox.post.remote(batch), timeout=10)
        except Exception:  # the driver is gone or slow: training goes on, its events are dropped
            return
        if signum and not self.stop.signal:
            self.stopped_by_driver = True
            self.stop.request(signum)


def run_attempt(task: SessionTask, mailbox: Any) -> events.SessionEnded:
    """One attempt at a session, on a worker. Ray may run it again after losing it; each run takes
    the session's lease first (`rlrun.session.loop.run_session`)."""
    import ray

    from rlrun.session.loop import SessionFailed, run_session

    task = replace(task, node=ray.get_runtime_context().get_node_id()[:16])
    stop = StopRequest()
    ended: list[events.SessionEnded] = []
    with _Relay(mailbox, stop) as relay, stop_on_signals(stop):
        def emit(event: events.Event) -> None:
            if isinstance(event, events.SessionEnded):
                ended.append(event)
            relay.emit(event)

        with contextlib.suppress(SessionFailed):  # recorded, and reported through `emit`
            run_session(task, emit, stop, on_lease=continue_lost_attempt)
    if ended and ended[-1].status == "preempted" and not relay.stopped_by_driver and not _stop_asked(task):
        raise WorkerStopped(f"session s{task.index} of run {task.run_id} was stopped on node {task.node}"
                            f" (signal {stop.signal}) with a snapshot")
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


# ---------------------------------------------------------------------------------------------
# Storage every node reaches


def _check_reachable(address: str) -> None:
    """A HOST:PORT that refuses connections is bad input at once (Ray itself keeps trying)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=5).close()
    except OSError as error:
        raise ClusterUnreachable(f"no Ray cluster at --ray {address}: {error.strerror or error}; start one with"
                                 " `ray start --head` or give its address (--ray HOST:PORT)") from None


def start_detached(ray: Any, actor_class: type, name: str, placement: str | None, args: tuple[Any, ...], *,
                   what: str, again: str) -> str:  # fmt: skip
    """Start a detached actor of `actor_class` named `name` (namespace `rlrun`, started again by Ray
    for ever, no CPU, on the nodes that offer the resource `placement` when given, rlrun's settings
    in its environment) and return where it runs once it says so (its `ready`): TrainingFailed
    naming `what` and what to do (`again`) when it does not start."""
    actor = ray.remote(actor_class).options(
        name=name, namespace=SUPERVISOR_NAMESPACE, lifetime="detached", max_restarts=-1, num_cpus=0,
        resources={placement: SUPERVISOR_SHARE} if placement else None,
        runtime_env={"env_vars": forwarded_environment()},
    ).remote(*args)
    try:
        where: str = ray.get(actor.ready.remote(), timeout=PROBE_SECONDS)
    except Exception as error:
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)
        raise TrainingFailed(f"{what} did not start on the cluster ({type(error).__name__}: {error});"
                             f" {again}") from None
    return where


SUPERVISOR_SHARE = 0.001
"""How much of `--supervisor-on`'s resource a supervisor takes: a token, so one node hosts many."""


def check_supervisor_placement(ray: Any, resource: str) -> None:
    """`--supervisor-on RESOURCE`: some live node must offer it, else Ray would wait for one for
    ever; bad input at once, before anything is written. Ray's own resources are not custom ones."""
    if resource.strip() != resource or not resource or resource in ("CPU", "GPU", "memory", "object_store_memory"):
        raise BadInput(f"--supervisor-on {resource!r}: give the name of a custom resource that the nodes meant for"
                       " supervisors offer (`ray start --resources '{\"on_demand\": 1}'`)")
    offered = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get(resource, 0) >= SUPERVISOR_SHARE]
    if not offered:
        raise BadInput(f"--supervisor-on {resource}: no live node of the Ray cluster offers the resource {resource};"
                       f" start one with `ray start --resources '{{\"{resource}\": 1}}'`, or drop --supervisor-on")


def check_storage(ray: Any, home: Path, db_url: str, cpus: float, gpus: float, *,
                  modules: Sequence[str] = (), every_node: bool = False) -> None:  # fmt: skip
    """Write a marker file into the home (and beside a SQLite registry) and have a probe task on
    every node that may run a session look for it, and import the user's `modules` as a session
    would (the job ships those not installed): a node that cannot see or import one is bad input naming the
    node and the path or module. `every_node`: every node of the cluster, the ones a detached
    supervisor may run on included. The markers are removed either way: nothing is left written."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    token = uuid.uuid4().hex
    places = {"runs home": home}
    db_file = sqlite_file(db_url)
    if db_file is not None:
        places["SQLite registry"] = db_file.parent
    made: list[Path] = []
    markers: dict[str, str] = {}
    mirror = storage.mirror_of(home)
    try:
        if mirror is not None:  # a home in object storage (reached already: `storage.reach`): every node must too
            mirror.put_bytes(mirror.key(home / f".rlrun-probe-{token}"), token.encode())
            markers["runs home"] = f"{mirror.url}/.rlrun-probe-{token}"
        for what, folder in places.items():
            if what in markers:
                continue
            made += [p for p in (folder, *folder.parents) if not p.exists()]
            folder.mkdir(parents=True, exist_ok=True)
            marker = folder / f".rlrun-probe-{token}"
            marker.write_text(token)
            markers[what] = str(marker)
        alive = [n for n in ray.nodes() if n.get("Alive")]
        nodes = [n for n in alive if _fits(n.get("Resources", {}), cpus, gpus)]
        if nodes and every_node:
            nodes = alive
        if not nodes:
            raise ClusterUnreachable(f"no node of the Ray cluster has {cpus:g} CPU(s) and {gpus:g} GPU(s) for a"
                                     " session; add nodes or ask for less (--cpus, --gpus)")
        probe = ray.remote(find_markers)
        found = [probe.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                 .remote(markers, token, list(modules)) for n in nodes]  # fmt: skip
        try:
            answers = ray.get(found, timeout=PROBE_SECONDS)
        except Exception as error:
            raise BadInput(f"the Ray cluster's nodes did not answer a storage check ({type(error).__name__}: {error});"
                           " check that rlrun is installed on every node") from None
        for node, missing in zip(nodes, answers, strict=True):
            if missing:
                raise BadInput(_unreachable(node, missing[0], places, db_file is not None))
    finally:
        for written in markers.values():
            if storage.is_url(written):
                assert mirror is not None
                mirror.delete([mirror.key(home / written.rpartition("/")[2])])
            else:
                Path(written).unlink(missing_ok=True)
        for folder in sorted(made, key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                folder.rmdir()


def _fits(resources: dict[str, float], cpus: float, gpus: float) -> bool:
    return resources.get("CPU", 0) >= cpus and resources.get("GPU", 0) >= gpus


def _unreachable(node: dict[str, Any], what: str, places: dict[str, Path], sqlite: bool) -> str:
    where = f"node {node.get('NodeManagerAddress', '?')} ({node['NodeID'][:16]})"
    if what.startswith(_MODULE):
        module, _, error = what.removeprefix(_MODULE).partition(" ")
        return (f"{where} cannot import {module} {error}, which the spec names; install what it needs on"
                " every node (a module found here beside the spec or on PYTHONPATH is shipped to the workers)")
    if what == "SQLite registry":
        return (f"{where} cannot reach the SQLite registry in {places[what]}; a registry for several hosts belongs"
                " on PostgreSQL (RLRUN_DB=postgresql+psycopg://...): SQLite's locking is unsafe on NFS")
    if storage.mirror_of(places[what]) is not None:
        url = storage.address(places[what])
        return (f"{where} cannot reach the runs home {url} in object storage; give every node credentials for it"
                f" (as the cloud's own tools find them) and, where it needs one, {storage.endpoint_setting(url)}")
    advice = " and RLRUN_DB on PostgreSQL" if sqlite else ""
    return (f"{where} cannot see the runs home {places[what]}; put --home on storage every node mounts at the same"
            f" path (NFS, a cluster file system){advice}")


_MODULE = "module "


def find_markers(markers: dict[str, str], token: str, modules: Sequence[str] = ()) -> list[str]:
    """On a node: which of the marker files (by what they mark) it cannot read back, and which of the
    user's modules it cannot import as a session would ("module NAME (why)")."""
    from rlrun.spec.env_ids import import_failure

    missing = []
    for what, marker in markers.items():
        try:
            found = storage.read_url(marker) if storage.is_url(marker) else Path(marker).read_bytes()
            if found != token.encode():
                missing.append(what)
        except Exception:  # a store's library raises its own errors: the node cannot reach it
            missing.append(what)
    for module in modules:
        failure = import_failure(module)
        if failure is not None:
            missing.append(f"{_MODULE}{module} ({failure[0]})")
    return missing


def ray_executor(address: str | None, *, cpus: float | None = None, gpus: float | None = None,
                 handle_signals: bool = True, stop: StopRequest | None = None,
                 detach: bool = False, supervisor_on: str | None = None) -> RayExecutor:  # fmt: skip
    """The executor `--ray [ADDRESS]` asks for (ADDRESS: $RLRUN_RAY_ADDRESS, else "auto"); with
    `detach` (`--detach`), the run's supervision is handed to the cluster, on the nodes that offer
    the resource `supervisor_on` (`--supervisor-on`) when given."""
    return RayExecutor(address, cpus=1.0 if cpus is None else cpus, gpus=0.0 if gpus is None else gpus,
                       handle_signals=handle_signals, stop=stop, detach=detach, supervisor_on=supervisor_on)


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
        return ray_executor(self.address, cpus=self.cpus, gpus=self.gpus, handle_signals=self.handle_signals,
                            stop=stop)

    def for_worker(self) -> RayTrials:
        return replace(self, handle_signals=False)


# ---------------------------------------------------------------------------------------------
# A detached run's supervisor


SUPERVISOR_NAMESPACE = "rlrun"
"""The Ray namespace of the supervisors' actors (named rlrun-RUN_ID-XXXXXX)."""


class DetachedSupervisor:
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

    def __init__(self, tasks: list[SessionTask], name: str, cpus: float, gpus: float) -> None:
        import ray

        context = ray.get_runtime_context()
        self.where = supervisor_label(name, context.get_node_id()[:16])
        restarted = context.was_current_actor_reconstructed
        first = tasks[0]
        with Registry.open(paths.task_home(first.home), first.db_url) as registry:
            took = registry.supervise_run(first.run_id, supervisor=self.where, host=socket.gethostname(),
                                          pid=os.getpid(), again_as=supervisor_label(name) if restarted else None)
        # A restart that finds the run taken over (a resume while Ray could not place this actor)
        # or ended leaves it alone, and ends for good: two supervisors would fight over its leases.
        work = functools.partial(_supervise_detached, tasks, cpus, gpus, self.where) if took else lambda: None
        self._thread = threading.Thread(target=until_done, args=(work,), daemon=True, name="rlrun-supervisor")
        self._thread.start()

    def ready(self) -> str:
        """Where the supervisor runs, once it has taken the run over."""
        return self.where


def supervisor_label(name: str, node: str = "") -> str:
    """How the registry and `rlrun show` name a detached supervisor: its actor, and its node (the
    label without a node begins every label of that actor, wherever Ray restarts it)."""
    return f"actor {SUPERVISOR_NAMESPACE}/{name} on node {node}"


def _supervise_detached(tasks: list[SessionTask], cpus: float, gpus: float, where: str) -> None:
    """The supervisor's work (`until_done`): the sessions that have not ended, supervised to their
    end, and the run's end recorded. A resume that takes the run over meanwhile ends the
    supervision (`SupervisionTaken`), its attempts cancelled and the run's end left to the resume."""
    from rlrun.training.api import settle_run

    first = tasks[0]
    with Registry.open(paths.task_home(first.home), first.db_url) as registry:
        open_tasks = unfinished(registry, tasks)
    executor = RayExecutor(cpus=cpus, gpus=gpus, handle_signals=False)
    executor.supervising_as = where
    with contextlib.suppress(SupervisionTaken):
        execution = executor._supervise(import_ray(), open_tasks, lambda event: None) if open_tasks \
            else Execution([])
        with Registry.open(paths.task_home(first.home), first.db_url) as registry:
            settle_run(registry, first.run_id, execution)


def until_done(work: Callable[[], None]) -> None:
    """A detached actor's thread (a run's supervisor, a search's driver): `work` to its end, then
    the actor ended for good (Ray told not to start it again). An error ends the actor's process
    instead, and Ray starts it again, which looks at the registry again."""
    try:
        work()
    except BaseException:
        import traceback

        traceback.print_exc()
        os._exit(1)
    ray = import_ray()
    ray.kill(ray.get_runtime_context().current_actor, no_restart=True)


def unfinished(registry: Registry, tasks: Sequence[SessionTask]) -> list[SessionTask]:
    """The tasks whose sessions still have work: not finished or failed, and not stopped by
    `rlrun stop` (a session preempted otherwise, by its worker's SIGTERM, was being retried)."""
    run = registry.get_run(tasks[0].run_id)
    stopped = registry.stop_requested(run.run.id)
    done = {s.index for s in run.sessions
            if s.status in ("finished", "failed") or (s.status == "preempted" and stopped)}
    return [t for t in tasks if t.index not in done]


__all__ = ["ADDRESS_ENV", "SUPERVISOR_NAMESPACE", "DetachedSupervisor", "RayExecutor", "SupervisionTaken",
           "WorkerStopped", "continue_lost_attempt", "import_ray", "ray_executor", "run_attempt", "start_detached",
           "supervisor_label", "unfinished", "until_done"]
