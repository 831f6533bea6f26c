"""A detached search (`rlrun search ... --ray --detach`, `rlrun resume search:REF --ray --detach`):
the command records the search and hands its driving to a detached actor on the Ray cluster
(`DetachedSearchDriver`), so the machine that started it may go away; each trial's sessions are
then placed by Ray from there, as `--ray` places them from the command.

The actor drives the search with the same code as the command would (`rlrun.search.drive_search`),
from what the registry holds. Ray starts it again when its node or process dies (`max_restarts=-1`):
the new one waits until the search reads crashed (its predecessor silent for the liveness limit,
by the database's clock), takes it over and continues it as `rlrun resume search:` would, so the
search is the same search, trial for trial, each trial's run bit for bit. If meanwhile the search
was continued by another driver (a `rlrun resume search:` in the foreground), the restarted actor
waits for that driver to end and then ends too: one driver at a time, whoever is alive.

Ray is an optional extra, imported only here and in `rlrun.training.ray`.
"""

from __future__ import annotations

import functools
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

from rlrun import paths
from rlrun.registry import Registry
from rlrun.registry.liveness import heartbeat_seconds
from rlrun.spec import Spec, user_code
from rlrun.training.ray.detached import DetachedActor, detached_name


class RayHandOver:
    """`--detach` for a search: the `rlrun.search.HandOver` that starts its driver on the cluster."""

    def __init__(
        self, address: str | None, *, cpus: float | None, gpus: float | None, supervisor_on: str | None
    ) -> None:
        from rlrun.training.ray import ray_executor

        # Checks the cluster as a detached run's does: every node sees the home, the driver's node included.
        self.executor = ray_executor(address, cpus=cpus, gpus=gpus, detach=True, supervisor_on=supervisor_on)

    def prepare(self, root: Path, url: str, spec: Spec) -> None:
        self.executor.prepare(root, url, modules=user_code(spec))

    def start(self, root: Path, url: str, search_id: str) -> str:
        from rlrun.training.ray import import_ray, start_detached

        name = detached_name(f"search-{search_id}")
        args = (paths.home_address(root), url, search_id, name, self.executor.cpus, self.executor.gpus)
        try:
            return start_detached(
                import_ray(),
                DetachedSearchDriver,
                name,
                self.executor.supervisor_on,
                args,
                what="the search's driver",
                again=f"continue it with `rlrun resume search:{search_id} --ray`",
            )
        finally:
            self.executor.close()


class DetachedSearchDriver(DetachedActor):
    """A detached search's driver: a detached actor that drives the search in a thread of its own,
    started by the constructor (all a restart runs). A first start takes the search over at once;
    a restart waits for it to read crashed (see the module's note)."""

    thread_name = "rlrun-search-driver"

    def __init__(self, home: str, url: str, search_id: str, name: str, cpus: float, gpus: float) -> None:
        os.environ[paths.DB_ENV] = url  # the trials' runs find the search's registry as the command did
        self._root, self._url, self._search_id = paths.task_home(home), url, search_id
        self._cpus, self._gpus = cpus, gpus
        super().__init__(name)

    def _take_over(self, name: str, *, restarted: bool) -> Callable[[], None]:
        if not restarted:
            with Registry.open(self._root, self._url) as registry:
                registry.reopen_search(self._search_id, host=socket.gethostname(), pid=os.getpid(), driver=self.where)
        return functools.partial(
            _drive, self._root, self._url, self._search_id, self._cpus, self._gpus, restarted, self.where
        )


def _drive(root: Path, url: str, search_id: str, cpus: float, gpus: float, restarted: bool, where: str) -> None:
    """The driver's work (`until_done`): the search driven to its end, after a restart once it is
    this actor's to drive (`where`: the actor, as the registry names the search's driver)."""
    from rlrun.search import drive_search
    from rlrun.training.ray import RayExecutor

    if not restarted or taken_back(root, url, search_id, where):
        drive_search(
            root, url, search_id, lambda stop: RayExecutor(cpus=cpus, gpus=gpus, handle_signals=False, stop=stop)
        )


def taken_back(root: Path, url: str, search_id: str, where: str) -> bool:
    """A restarted driver's wait: True once it has taken the search back (it read crashed), False
    when the search ended meanwhile (under another driver, or before the restart)."""
    while True:
        with Registry.open(root, url, create=False) as registry:
            found = registry.get_search(search_id)
            status = found.search.status  # as reported: crashed once its driver is silent
            # The trial in flight must read crashed too (its sessions ended with their owner, the
            # lost driver, but may have beaten a moment later): else its resume would be refused.
            settled = all(
                registry.live_session(t.run_id) is None
                for t in found.trials
                if t.state == "running" and t.run_id is not None
            )
            if status == "crashed" and settled:
                registry.reopen_search(search_id, host=socket.gethostname(), pid=os.getpid(), driver=where)
                return True
        if status not in ("running", "crashed"):
            return False
        time.sleep(heartbeat_seconds())
