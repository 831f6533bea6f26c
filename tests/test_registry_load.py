"""A PostgreSQL registry shared by a cluster's sessions.

Two dozen session processes, each writing what a session writes (attempt, start, heartbeats,
evaluations, snapshots with the retention rule, finish) at a few hundred times the real cadence for
a few seconds, four runs sharing them: no write fails (no deadlock), and every row a write returned
for is there afterwards, each run settled as finished. The sessions are those of
`tests/benchmarks/registry_cluster_load.py` (the cluster benchmark), one process each here, as on a
cluster. And a session's connection keeps no prepared statement, so a pooler in transaction mode
(PgBouncer) can hand its transactions to any server connection."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmarks.registry_cluster_load import Cadence, create_runs, rows_lost, run_cluster

from rlrun.registry import Registry

pytest_plugins = ["postgres_server"]

PROCESSES = 24
RUNS = 4
SECONDS = 3.0
# Heartbeat every 50 ms, evaluation every 100 ms, snapshot every 300 ms (keep 2).
FAST = Cadence(
    heartbeat_seconds=0.05, fps=100_000, eval_frequency=10_000, checkpoint_frequency=30_000, keep_checkpoints=2
)


@pytest.mark.slow  # two dozen processes
def test_two_dozen_session_processes_lose_nothing(postgres_url: str, tmp_path: Path) -> None:
    home = tmp_path / "runs"
    with Registry.open(home, postgres_url) as registry:
        slots = create_runs(registry, RUNS, PROCESSES, FAST, SECONDS)
    outcomes, _ = run_cluster(home, postgres_url, slots, FAST, SECONDS, processes=PROCESSES, launch_spread=0.0)

    assert len(outcomes) == PROCESSES
    assert [error for outcome in outcomes for error in outcome.errors] == []
    with Registry.open(home, postgres_url) as registry:
        assert rows_lost(registry, outcomes) == []
        runs = registry.list_runs(limit=None)
    assert sorted(r.status for r in runs) == ["finished"] * RUNS
    # The load was real: the sessions evaluated, snapshotted and pruned many times (about 30
    # evaluations each on a quiet machine; fewer where every write waits for a busy CPU).
    counts = [(len(o.evaluations), len(o.latencies.get("heartbeat", [])), len(o.removed)) for o in outcomes]
    assert all(evaluations >= 2 for evaluations, _, _ in counts), counts  # one in the loop, the final one
    assert sum(e for e, _, _ in counts) >= 4 * PROCESSES and sum(h for _, h, _ in counts) >= 2 * PROCESSES, counts
    assert sum(r for _, _, r in counts) >= PROCESSES, counts
    for outcome in outcomes:  # kept: the newest `keep_checkpoints` periodic ones, the best and the final one
        assert 1 <= len(outcome.checkpoints) <= FAST.keep_checkpoints + 2


def test_a_session_connection_keeps_no_prepared_statement(postgres_url: str, tmp_path: Path) -> None:
    with Registry.open(tmp_path / "runs", postgres_url) as registry:
        (slot,) = create_runs(registry, 1, 1, FAST, SECONDS)
        for frame in range(1, 21):  # psycopg would prepare a statement run five times
            registry.heartbeat(slot.session_id, frame=frame, episode=0, opt_step=0)
            registry.add_evaluation(slot.session_id, frame=frame, mean=1.0, std=0.0, min=1.0, max=1.0, episodes=1)
        with registry._db.engine.connect() as conn:  # type: ignore[attr-defined]  # the pool's one connection
            prepared = conn.exec_driver_sql("SELECT count(*) FROM pg_prepared_statements").scalar_one()
    assert prepared == 0
