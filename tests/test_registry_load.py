"""Two dozen session processes on one PostgreSQL registry, each writing what a session writes
(attempt, start, heartbeats, evaluations, snapshots with the retention rule, finish) at a few
hundred times the real cadence for a few seconds, four runs sharing them: no write fails (no
deadlock), and every row a write returned for is there afterwards, each run settled as finished.

The sessions are those of `tests/benchmarks/registry_cluster_load.py` (the cluster benchmark), one
process each here, as on a cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmarks.registry_cluster_load import Cadence, create_runs, rows_lost, run_cluster

from rlrun.registry import Registry

pytest_plugins = ["postgres_server"]
pytestmark = pytest.mark.slow  # two dozen processes

PROCESSES = 24
RUNS = 4
SECONDS = 3.0
# Heartbeat every 50 ms, evaluation every 100 ms, snapshot every 300 ms (keep 2).
FAST = Cadence(heartbeat_seconds=0.05, fps=100_000, eval_frequency=10_000, checkpoint_frequency=30_000,
               keep_checkpoints=2)  # fmt: skip


def test_two_dozen_session_processes_lose_nothing(postgres_url: str, tmp_path: Path) -> None:
    home = tmp_path / "runs"
    with Registry.open(home, postgres_url) as registry:
        slots = create_runs(registry, RUNS, PROCESSES, FAST, SECONDS)
    outcomes = run_cluster(home, postgres_url, slots, FAST, SECONDS, processes=PROCESSES, launch_spread=0.0)

    assert len(outcomes) == PROCESSES
    assert [error for outcome in outcomes for error in outcome.errors] == []
    with Registry.open(home, postgres_url) as registry:
        assert rows_lost(registry, outcomes) == []
        runs = registry.list_runs(limit=None)
    assert sorted(r.status for r in runs) == ["finished"] * RUNS
    # The load was real: every session evaluated, snapshotted and pruned many times.
    for outcome in outcomes:
        assert len(outcome.evaluations) >= 10 and len(outcome.latencies["heartbeat"]) >= 10
        # Kept: the newest `keep_checkpoints` periodic ones, the best and the final one.
        assert 1 <= len(outcome.checkpoints) <= FAST.keep_checkpoints + 2 and len(outcome.removed) >= 3
