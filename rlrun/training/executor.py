"""The seam between deciding what to train and running it: an executor runs session tasks,
delivers their events, and stops them when asked (SIGINT/SIGTERM), then says how each ended.

`train` and `resume` record the run and build the tasks (`rlrun.session.task.SessionTask`: plain data
naming the run, the session, its seed, its spec and the snapshot to start from); what runs them, and
where, is the executor's business. Each session records its own progress in the registry, so an
executor only has to report what it saw.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rlrun.session import events
from rlrun.session.task import SessionTask

OnEvent = Callable[[events.Event], None]


@dataclass(frozen=True)
class Execution:
    ended: list[events.SessionEnded]
    """How each task ended, in the order of the tasks."""
    signal: int = 0
    """The signal that asked the sessions to stop (0 when none did)."""
    supervisor: str | None = None
    """Who supervises the sessions now that `run` has returned, when not this process (a detached
    run's actor on a cluster, as `rlrun show` names it): `ended` is then empty."""


class Executor(Protocol):
    def prepare(self, home: Path, db_url: str, *, modules: Sequence[str] = ()) -> None:
        """Check, before anything is written, that this executor can run sessions of this home and
        registry, importing the user's `modules` that register the env (a cluster: reachable, every
        node sees the home and gets the modules); BadInput if not."""
        ...

    def run(self, tasks: Sequence[SessionTask], on_event: OnEvent) -> Execution:
        """Run every task to its end and deliver their events to `on_event` as they come. A session
        that ends without saying how is recorded as failed by the executor. A detaching executor
        returns once a supervisor elsewhere has taken the tasks over (`Execution.supervisor`)."""
        ...

    def close(self) -> None:
        """Let go of what `prepare` took (a cluster connection) when no `run` follows (a search
        checks its trials' executor once, before it records anything); `run` lets go itself."""
        ...
