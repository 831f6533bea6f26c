"""Stopping a run from anywhere (`rlrun stop`): the library call, registry-only (no torch).

The request is a row, not a signal: `runs.stop_requested_at`, stamped with the database's clock.
Every session reads it with its heartbeat, wherever it runs (this machine, a Ray worker, under a
driver or a detached supervisor), and stops at its next step with a snapshot, as after SIGTERM; a
Ray supervisor reads it too, so that it retries none of them. So a stop needs no process to signal,
reaches a run whose launcher is on another machine or gone (a detached run), survives a supervisor
that is restarting, and is safe to repeat: the first request stands. `rlrun resume` clears it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlrun import paths
from rlrun.refs import RunFilter, RunRef
from rlrun.registry import Registry, RunRecord


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
        return {"run_id": self.run.id, "status": self.run.status, "stop_requested_at": self.requested_at,
                "repeated": self.repeated}


def stop(ref: RunRef | str = "latest", filters: RunFilter | None = None, *,
         home: Path | str | None = None) -> StopOutcome:  # fmt: skip
    """Ask the run `ref` names to stop with snapshots; returns at once (its sessions stop at their
    next heartbeat, a few seconds). A run that has ended, or crashed, has nothing to stop: said in
    the outcome, nothing written."""
    root = paths.resolve_home(home)
    with Registry.open(root, paths.database_url(root), create=False) as registry:
        run = registry.resolve(ref, filters)
        if run.status != "running":
            return StopOutcome(run, None)
        earlier = registry.request_stop(run.id)
        asked = earlier if earlier is not None else registry.resolve(run.id).stop_requested_at
    return StopOutcome(run, asked, repeated=earlier is not None)
