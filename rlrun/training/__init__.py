"""Training: the library calls behind `rlrun train` and `rlrun resume` (`api`), and the executors
that run a run's sessions (`local`: this process for one session, a worker process each for several;
`ray`: Ray tasks on a cluster, retried elsewhere under leases, for `--ray`, supervised
from this process or, `--detach`, by an actor on the cluster), the `supervisor` of local worker
processes (the local executor's sessions, a search's parallel trials), and `control`: `rlrun stop`,
a stop request any run's sessions read, wherever they run.

`train` and `resume` decide and record what to do; an executor only runs session tasks, delivers
their events and stops them on request, so another executor (a cluster's) slots in beside the local
one without touching them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlrun.training.api import (
        ResumePlan,
        SessionOutcome,
        TrainResult,
        check_compatible,
        plan_resume,
        resume,
        train,
    )
    from rlrun.training.executor import Execution, Executor

__all__ = [
    "Execution",
    "Executor",
    "ResumePlan",
    "SessionOutcome",
    "TrainResult",
    "check_compatible",
    "plan_resume",
    "resume",
    "train",
]


def __getattr__(name: str) -> Any:
    # Loaded on use: a spawned worker imports this package to reach `supervisor` or `local`, and
    # should not pay for the training API (the spec, the registry) it never calls.
    if name in ("Execution", "Executor"):
        from rlrun.training import executor

        return getattr(executor, name)
    if name in __all__:
        from rlrun.training import api

        return getattr(api, name)
    raise AttributeError(f"module 'rlrun.training' has no attribute {name!r}")
