"""Stopping a run from anywhere (`rlrun stop`): the library call, registry-only (no torch).

The request is a row, not a signal: `runs.stop_requested_at`, stamped with the database's clock.
Every session reads it with its heartbeat, wherever it runs (this machine, a Ray worker, under a
driver or a detached supervisor), and stops at its next step with a snapshot, as after SIGTERM; a
Ray supervisor reads it too, so that it retries none of them. So a stop needs no process to signal,
reaches a run whose launcher is on another machine or gone (a detached run), survives a supervisor
that is restarting, and is safe to repeat: the first request stands. `rlrun resume` clears it.

A search is stopped the same way (`stop_search`: `searches.stop_requested_at`): its driver, here
or detached on a cluster, reads the request with its heartbeat, starts no more trials and asks
its trials in flight to stop, so the search ends preempted and `rlrun resume search:` continues it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlrun import paths
from rlrun.refs import RunFilter, RunRef
from rlrun.registry import Registry, RunRecord
from rlrun.registry.records import SearchRecord
from rlrun.training.slurm.queue import is_slurm_driver


@dataclass(frozen=True)
class StopOutcome:
    run: RunRecord
    """The run, its status as reported when the stop was asked."""
    requested_at: float | None
    """When the stop was first asked (the database's clock); None: the run was not running, so
    nothing was asked of it."""
    repeated: bool = False
    """An earlier `rlrun stop` had asked already: this one changed nothing."""

    @property
    def stopping(self) -> bool:
        return self.requested_at is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run.id,
            "status": self.run.status,
            "stop_requested_at": self.requested_at,
            "repeated": self.repeated,
        }


def resume_command(record: RunRecord | SearchRecord) -> str:
    """The command that continues a run or search the way it ran: a detached one (a cluster actor
    supervised the run, or drove the search) detached again, on the cluster `--ray` finds; a plain
    `rlrun resume` would bring it back to this terminal, to end with it. One of SLURM's jobs (a
    run's sessions, a search's driver) is submitted again."""
    if isinstance(record, SearchRecord):
        reference, detached = f"search:{record.id}", record.driver
        on_slurm = is_slurm_driver(detached)
    else:
        reference, detached = record.id, record.supervisor
        on_slurm = bool(record.slurm_jobs)
    if on_slurm:
        return f"rlrun resume {reference} --slurm"
    return f"rlrun resume {reference} --ray --detach" if detached else f"rlrun resume {reference}"


def stop(
    ref: RunRef | str = "latest", filters: RunFilter | None = None, *, home: Path | str | None = None
) -> StopOutcome:
    """Ask the run `ref` names to stop with snapshots; returns at once (its sessions stop at their
    next heartbeat, a few seconds). A run that has ended, or crashed, has nothing to stop: said in
    the outcome, nothing written. A run whose SLURM job waits in the queue (not started yet, or
    requeued) is stopping too: its sessions stop at their first heartbeat once the job starts."""
    root = paths.resolve_home(home)
    with Registry.open(root, paths.database_url(root), create=False) as registry:
        run = registry.resolve(ref, filters)
        if run.status != "running" and not _queued_on_slurm(run):
            return StopOutcome(run, None)
        earlier = registry.request_stop(run.id)
        asked = earlier if earlier is not None else registry.resolve(run.id).stop_requested_at
    return StopOutcome(run, asked, repeated=earlier is not None)


def _queued_on_slurm(run: RunRecord) -> bool:
    if not run.slurm_jobs:
        return False
    from rlrun.training.slurm.queue import WAITING, job_states

    return any(state in WAITING for state in job_states(run.slurm_jobs.split(",")).values())


@dataclass(frozen=True)
class SearchStopOutcome:
    search: SearchRecord
    """The search, its status as reported when the stop was asked."""
    requested_at: float | None
    """When the stop was first asked (the database's clock); None: the search was not running."""
    repeated: bool = False
    """An earlier `rlrun stop search:` had asked already: this one changed nothing."""

    @property
    def stopping(self) -> bool:
        return self.requested_at is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "search_id": self.search.id,
            "status": self.search.status,
            "stop_requested_at": self.requested_at,
            "repeated": self.repeated,
        }


def stop_search(ref: RunRef | str = "search:latest", *, home: Path | str | None = None) -> SearchStopOutcome:
    """Ask the search `ref` names to stop: its driver starts no more trials and its trials in
    flight stop with snapshots (at once: their runs are asked here too; a trial started as the
    request came is asked by the driver's next beat). Returns at once. A search that has ended, or
    whose driver is gone (crashed), has nothing to stop: said in the outcome, nothing written."""
    root = paths.resolve_home(home)
    with Registry.open(root, paths.database_url(root), create=False) as registry:
        search = registry.resolve_search(ref)
        if search.status != "running":
            return SearchStopOutcome(search, None)
        earlier = registry.request_search_stop(search.id)
        if earlier is not None:
            return SearchStopOutcome(search, earlier, repeated=True)
        now = registry.resolve_search(f"search:{search.id}")
    # None: it ended between the look and the request (nothing was written); reported as it is now
    return SearchStopOutcome(search if now.stop_requested_at is not None else now, now.stop_requested_at)
