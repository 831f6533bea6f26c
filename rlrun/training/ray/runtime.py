"""Ray itself, an optional extra (`import_ray`: the one place that says how to get it), and what
every process rlrun starts on the cluster (a session's worker, a detached actor) takes from this
one's environment (`forwarded_environment`): a worker's environment is its node's otherwise."""

from __future__ import annotations

import os
from typing import Any

from rlrun import storage
from rlrun.errors import BadInput, install_hint

ADDRESS_ENV = "RLRUN_RAY_ADDRESS"


def cluster_address(given: str | None = None) -> str:
    """The cluster's address: the one given (`--ray ADDRESS`), else $RLRUN_RAY_ADDRESS, else Ray's "auto"."""
    return given or os.environ.get(ADDRESS_ENV) or "auto"


def import_ray() -> Any:
    """Ray, or the one line that says how to get it."""
    try:
        import ray
    except ImportError:
        raise BadInput(f"--ray needs Ray, an optional extra that is not installed: {install_hint('ray')}") from None
    return ray


def forwarded_environment() -> dict[str, str]:
    """rlrun's own settings (RLRUN_TENSORBOARD, the test hooks) reach the sessions as they would
    local ones; a worker's environment is its node's, not this process's. So does OpenMP's wait
    policy (`rlrun.spec.cores.let_idle_threads_sleep`): Ray starts a fresh worker process for these
    variables, which reads it when torch loads there."""
    from rlrun.spec.cores import OPENMP_WAIT_POLICY

    return {
        k: v
        for k, v in os.environ.items()
        if (k.startswith("RLRUN_") and k not in ("RLRUN_HOME", "RLRUN_DB", storage.CACHE_ENV))
        or k == OPENMP_WAIT_POLICY
    }
