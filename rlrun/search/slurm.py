"""A search driven from a SLURM job (`rlrun search ... --slurm`, `rlrun resume search:REF --slurm`):
the command records the search and submits its driver as a job of its own (`SlurmHandOver`, through
the SLURM executor's checks and submission, `rlrun.training.slurm`), whose trials train in that job,
one at a time, as the command's would.

The driver's job may be requeued like any other (its time limit's USR2, through submitit's
`checkpoint`; a preemption or `scontrol requeue`, by SLURM) or killed. The job that runs again
(`SLURM_RESTART_COUNT`) takes the search back once it reads crashed, as a Ray driver restarted
after losing its node does (`rlrun.search.detached`), and continues it as `rlrun resume search:`
would: ended trials kept, the trial in flight from its run's newest snapshots, the rest suggested as
they would have been. The same search, trial for trial, each trial's run bit for bit."""

from __future__ import annotations

import os
import signal
import socket
import threading
from pathlib import Path
from typing import Any

from rlrun import paths
from rlrun.registry import Registry
from rlrun.spec import Spec, user_code
from rlrun.training.slurm.job import JOIN_SECONDS  # as a session's job: its main thread keeps the signals


class SlurmHandOver:
    """`--slurm` for a search: the `rlrun.search.HandOver` that submits its driver as a SLURM job
    with the spec's `meta.slurm` options, checked (as a run's jobs are) before anything is written."""

    def __init__(self) -> None:
        from rlrun.training.slurm import SlurmExecutor

        self.executor = SlurmExecutor()
        self.spec: Spec | None = None

    def prepare(self, root: Path, url: str, spec: Spec) -> None:
        self.spec = spec
        self.executor.use(spec.meta.slurm)
        self.executor.prepare(root, url, modules=user_code(spec))

    def start(self, root: Path, url: str, search_id: str) -> str:
        slurm = self.spec.meta.slurm if self.spec is not None else None
        driver = SearchDriverJob(paths.home_address(root), url, search_id)
        job = self.executor.submit(root / "slurm" / f"search-{search_id}", f"rlrun-search-{search_id}", slurm, driver)
        return f"SLURM job {job}"


class SearchDriverJob:
    """The search's driver as submitit pickles it: where the search lives (plain data). In the job
    it drives the search in a thread; the main thread keeps the signals for submitit."""

    def __init__(self, home: str, url: str, search_id: str) -> None:
        self.home, self.url, self.search_id = home, url, search_id

    def __call__(self) -> None:
        os.environ[paths.DB_ENV] = self.url  # the trials' runs find the search's registry as the command did
        restarted = int(os.environ.get("SLURM_RESTART_COUNT") or 0) > 0
        # SLURM's SIGTERM (a preemption, a requeue, a cancel) ends the driver at once, as a lost node
        # would: a graceful stop would record the trial in flight stopped, and the search with it,
        # where the job run again must find them interrupted. Its trial continues from its newest
        # snapshot; submitit would ignore the signal and leave the job to SLURM's SIGKILL.
        signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(128 + signum))
        # A daemon: when submitit requeues the job and exits, the driver goes with the process, as
        # with a lost node; its trial continues from its newest snapshot in the job run again.
        driver = threading.Thread(target=self._drive, args=(restarted,), daemon=True, name="rlrun-search-driver")
        driver.start()
        while driver.is_alive():
            driver.join(JOIN_SECONDS)

    def checkpoint(self) -> Any:
        """submitit's call on USR2: the same driver, to requeue (the registry holds its state)."""
        import submitit

        return submitit.helpers.DelayedSubmission(SearchDriverJob(self.home, self.url, self.search_id))

    def _drive(self, restarted: bool) -> None:
        from rlrun.search import drive_search
        from rlrun.search.detached import taken_back
        from rlrun.training.local import LocalExecutor
        from rlrun.training.slurm.queue import driver_label

        root = paths.task_home(self.home)
        where = driver_label(os.environ.get("SLURM_JOB_ID", "?"))  # what `rlrun stop search:` reads
        if not restarted:
            with Registry.open(root, self.url) as registry:
                registry.reopen_search(self.search_id, host=socket.gethostname(), pid=os.getpid(), driver=where)
        elif not taken_back(root, self.url, self.search_id, where):
            return
        drive_search(root, self.url, self.search_id, lambda stop: LocalExecutor(handle_signals=False, stop=stop))
