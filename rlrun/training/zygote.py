"""Worker processes forked from a zygote: a server process that imported torch, gymnasium and
rlrun's training modules once, and forks each session (or trial) process from that state, where a
spawned process would import them all again (about 2.4 CPU-seconds each; a search or a run of many
sessions starts hundreds). The zygote is multiprocessing's forkserver, a dedicated instance (not
the per-process singleton a caller's own forkserver may use), started by the first `Supervisor.run`
of a process and kept for the next ones (a notebook's trainings, an in-process search's, a test
suite's: each run started its own, 2.4 CPU-seconds each), as multiprocessing keeps its own: it ends
with that process. The workers it forks end with their run; the zygote runs nothing between runs.
A run whose startup variables (`STARTUP`) differ from the kept zygote's starts one of its own.

A forked worker is what a spawned one was:
- the supervisor's current environment, working directory and `sys.path` (multiprocessing's
  preparation data carries the last two; `worker` applies the first before the work runs, rlrun
  reading its environment when it runs, never at import). Variables an interpreter reads as it
  starts (`STARTUP`) cannot be applied after the fact: a worker whose supervisor now sets them
  otherwise than the zygote's environment did is spawned instead (`suits`);
- a clean torch: the zygote only imports (no op runs there, so no OpenMP thread team exists to be
  lost in the fork), and torch's global state is what import leaves, as in a fresh interpreter;
- signals: the zygote shares the supervisor's process group, so it blocks SIGTERM and SIGHUP (a
  signal to the group is the supervisor's and the workers' to handle: the zygote's death would read
  as every worker's) and ignores SIGINT (multiprocessing's own rule); a worker unblocks them first
  thing. Workers do not keep the zygote alive: it ends with its supervisor (even after kill -9),
  so a worker whose supervisor died sees its parent change (`os.getppid()`), as a spawned one did;
- its `atexit` handlers run as it ends, as an interpreter's do at exit.

`RLRUN_START_METHOD=spawn` spawns every worker, as rlrun did before (docs/how-to/cores.md).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator, Mapping
from multiprocessing import forkserver, popen_forkserver, reduction, resource_tracker, spawn, util
from multiprocessing.context import ForkServerProcess, set_spawning_popen
from typing import Any

from rlrun.errors import BadInput

PRELOAD = ["torch", "gymnasium", "rlrun.session.loop", "rlrun.algorithms", "rlrun.search.trial"]
"""What every session or trial process imports anyway: the zygote pays for it once."""
STARTUP = ("PYTHON", "LD_", "OMP_", "KMP_", "MKL_")
"""Environment variables an interpreter reads as it starts (PYTHONPATH, a sitecustomize on it,
PYTHONHASHSEED, the libraries it loads, OpenMP's settings, read as torch loads)."""
START_METHOD = "RLRUN_START_METHOD"
"""How worker processes start: "forkserver" (the default: forked from the zygote) or "spawn"."""
START_METHODS = ("forkserver", "spawn")
BLOCKED_IN_ZYGOTE = {signal.SIGTERM, signal.SIGHUP}
"""Signals the zygote holds back (its process group's signals are not for it); workers take them."""

_parent: int | None = None
"""In a worker process: its parent as it started (the zygote, or the supervisor that spawned it)."""


def startup_variables(env: Mapping[str, str]) -> dict[str, str]:
    """What of `env` an interpreter reads as it starts."""
    return {key: value for key, value in env.items() if key.startswith(STARTUP)}


def wanted_start_method(env: Mapping[str, str]) -> str:
    method = env.get(START_METHOD, "forkserver")
    if method not in START_METHODS:
        raise BadInput(f"{START_METHOD}={method!r} is not a start method; use one of {', '.join(START_METHODS)}")
    return method


class Zygote:
    """A forkserver of its own: `start` it, make each worker with `process`, `stop` it at the end."""

    def __init__(self, preload: list[str]) -> None:
        self._server = forkserver.ForkServer()
        self._server.set_forkserver_preload(preload)
        self._startup: dict[str, str] = {}

    def start(self) -> None:
        """Start the server (it imports in the background: the first fork waits for it)."""
        self._startup = startup_variables(os.environ)
        resource_tracker.ensure_running()  # first: it unblocks SIGTERM as it starts, which would undo ours
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, BLOCKED_IN_ZYGOTE)  # inherited through exec
        try:
            self._server.ensure_running()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    def suits(self, env: Mapping[str, str]) -> bool:
        """Whether a worker with environment `env` may be forked from this zygote."""
        return startup_variables(env) == self._startup

    def process(self, **options: Any) -> multiprocessing.process.BaseProcess:
        """`multiprocessing.Process(**options)`, forked from this zygote when started."""
        return _ZygoteProcess(self._server, **options)

    def stop(self) -> None:
        """End the server (its workers have ended: it waits for none of them)."""
        self._server._stop()  # type: ignore[attr-defined]  # private, and what its own tests use


class _ZygotePopen(popen_forkserver.Popen):
    """multiprocessing's forkserver launch, asking `server` instead of the process's singleton."""

    def __init__(self, process_obj: Any, server: forkserver.ForkServer) -> None:
        self._server = server
        super().__init__(process_obj)

    def _launch(self, process_obj: Any) -> None:  # popen_forkserver.Popen._launch, but for the server
        prep_data = spawn.get_preparation_data(process_obj._name)
        buf = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            set_spawning_popen(None)
        self.sentinel, w = self._server.connect_to_new_process(self._fds)  # type: ignore[attr-defined]
        _parent_w = os.dup(w)  # the child's sentinel of this process, as multiprocessing keeps it
        self.finalizer = util.Finalize(self, util.close_fds, (_parent_w, self.sentinel))  # type: ignore[attr-defined]
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _ZygoteProcess(ForkServerProcess):
    def __init__(self, server: forkserver.ForkServer, **options: Any) -> None:
        super().__init__(**options)
        self._server = server

    def _Popen(self, process_obj: Any) -> Any:  # type: ignore[override]
        return _ZygotePopen(process_obj, self._server)

    def __getstate__(self) -> dict[str, Any]:
        return {key: value for key, value in self.__dict__.items() if key != "_server"}  # the child's is its parent


@contextlib.contextmanager
def workers(env: Mapping[str, str]) -> Iterator[Any]:
    """How the supervisor makes its worker processes while this is open: a function taking
    `multiprocessing.Process`'s options, forking from this process's zygote (`_forking_from`), or
    spawning (`RLRUN_START_METHOD`, or a worker whose startup variables differ)."""
    spawned = multiprocessing.get_context("spawn")
    if wanted_start_method(env) == "spawn":
        yield spawned.Process
        return
    with _forking_from() as zygote:
        yield lambda **options: (zygote.process if zygote.suits(os.environ) else spawned.Process)(**options)


class _Kept:
    """This process's zygote, and how many runs fork from it now (threads may run supervisors at
    once). A child forked from this process starts with none (`os.register_at_fork`): the zygote is
    its parent's."""

    def __init__(self) -> None:
        self.forget()

    def forget(self) -> None:
        self.lock = threading.Lock()
        self.zygote: Zygote | None = None
        self.runs = 0


_kept = _Kept()
os.register_at_fork(after_in_child=_kept.forget)


@contextlib.contextmanager
def _forking_from() -> Iterator[Zygote]:
    """The zygote this process keeps for its runs, started at its first (again if it died); a run
    whose startup variables differ from it replaces it, or takes one of its own while another run
    uses it."""
    kept = _take_kept()
    if kept is None:
        own = Zygote(PRELOAD)
        own.start()
        try:
            yield own
        finally:
            own.stop()
        return
    try:
        yield kept
    finally:
        with _kept.lock:
            _kept.runs -= 1


def _take_kept() -> Zygote | None:
    with _kept.lock:
        if _kept.zygote is not None and not _kept.zygote.suits(os.environ):
            if _kept.runs:
                return None
            _kept.zygote.stop()
            _kept.zygote = None
        if _kept.zygote is None:
            _kept.zygote = Zygote(PRELOAD)
        _kept.zygote.start()  # at once when it runs; the resource tracker it hands on, running again
        _kept.runs += 1
        return _kept.zygote


@atexit.register
def stop_kept() -> None:
    """Stop this process's zygote, if it started one: the `rlrun` command does as it ends (a command
    leaves no process behind it, whoever ends it), Python at exit (it would end anyway, its pipe to
    this process closed). A later run starts another."""
    with _kept.lock:
        if _kept.zygote is not None and not _kept.runs:
            _kept.zygote.stop()
            _kept.zygote = None


@contextlib.contextmanager
def worker(env: Mapping[str, str]) -> Iterator[None]:
    """Around a worker process's work, in that process: its supervisor's environment `env`, the
    signals the zygote held back, and `atexit` handlers run at the end, forked as spawned."""
    os.environ.clear()
    os.environ.update(env)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, BLOCKED_IN_ZYGOTE)
    global _parent
    forked = forkserver._forkserver._forkserver_alive_fd is not None  # type: ignore[attr-defined]
    # Read while the zygote is sure to live: this process holds its "alive" pipe until just below.
    _parent = os.getppid() if forked else _spawning_parent()
    if forked:  # the zygote's "alive" pipe: only the supervisor keeps the zygote alive
        os.close(forkserver._forkserver._forkserver_alive_fd)  # type: ignore[attr-defined]
        forkserver._forkserver._forkserver_alive_fd = None  # type: ignore[attr-defined]
    try:
        yield
    finally:
        if forked:
            atexit._run_exitfuncs()


def _spawning_parent() -> int | None:
    parent = multiprocessing.parent_process()
    return None if parent is None else parent.pid


def supervisor_gone() -> bool:
    """In a worker process: whether its supervisor has died (a forked worker's zygote ends with its
    supervisor), leaving it an orphan."""
    return _parent is not None and os.getppid() != _parent
