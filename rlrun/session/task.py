"""The unit of work an executor runs: one session's task, as plain data.

Torch-free (it imports neither torch nor gymnasium), so what builds and sends tasks (`rlrun.training`)
can name their type without loading what trains them. A task is pickled by its module path when it
is sent to a spawned process or a Ray worker, which run the same code as the sender.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SessionTask:
    """Everything a session process needs; plain data so it can be sent to a spawned process."""

    home: str
    db_url: str
    run_id: str
    session_id: int
    index: int
    seed: int
    spec: dict[str, Any]
    attempt: str = "train"
    """Why this process works on the session: "train", "resume" or "fork"."""
    resume_from: str | None = None
    """Snapshot to continue from, relative to the home (None: start at frame 0)."""
    resume_sha256: str | None = None
    lease_base: int | None = None
    """The session's lease token when the task was handed to an executor that may run it more
    than once (a cluster's): an attempt that takes a later token than the next one knows an
    earlier attempt ran, and continues from the session's newest snapshot instead (None: the
    executor runs it once)."""
    node: str | None = None
    """The cluster node this attempt runs on, as recorded with the attempt (None: not on a cluster)."""
    answer_evaluations: bool = False
    """The executor hears each evaluation before the session goes on (a callback's `on_evaluation`
    may stop the run there): the session waits for its evaluations, as under `meta.stop_at_return`,
    and, after each, for the executor to have heard it."""
