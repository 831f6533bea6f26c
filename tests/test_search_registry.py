"""The search records (issue 15) on SQLite and a real PostgreSQL server: written in short
transactions, read back as records, resolved by reference, unlinked (not lost) when a trial's run is
deleted. No training: the rows are what a search writes."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlrun.errors import BadInput, RunReferenceError
from rlrun.registry import Registry

pytest_plugins = ["postgres_server"]


@pytest.fixture(params=["sqlite", "postgresql"])
def registry(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Registry]:
    url = request.getfixturevalue("postgres_url") if request.param == "postgresql" else None
    with Registry.open(tmp_path / "home", url) as opened:
        yield opened


def test_a_search_and_its_trials_round_trip(registry: Registry) -> None:
    run = registry.create_run(run_id="ra00000001", name=None, spec_name="reinforce_cartpole", algorithm="reinforce",
                              env_id="CartPole-v1", max_frame=3000, seed=0, num_sessions=1, spec_json="{}",
                              host=socket.gethostname(), pid=os.getpid())
    search = registry.create_search(search_id="sa00000001", name="sweep", spec_name="reinforce_cartpole",
                                    spec_json="{}", space_json='{"agent.gamma": {"uniform": [0.9, 0.99]}}',
                                    settings_json=json.dumps({"trials": 2, "metric": "eval_mean"}),
                                    host=socket.gethostname(), pid=os.getpid())
    with pytest.raises(BadInput, match="a search named 'sweep' already exists"):
        registry.create_search(search_id="sb00000002", name="sweep", spec_name="x", spec_json="{}", space_json="{}",
                               settings_json="{}", host=None, pid=None)
    trial = registry.add_trial(search.id, number=0, run_id=run.id, params_json='{"agent.gamma": 0.95}')
    registry.record_trial(trial.id, intermediate_json="[[1000, 20.5]]", system_attrs_json='{"completed_rung_0": 20.5}')
    registry.record_trial(trial.id, intermediate_json="[[1000, 20.5], [3000, 80.0]]", system_attrs_json="{}",
                          state="complete", value=80.0)
    detail = registry.get_search(search.id)
    assert detail.search.status == "running"  # its driver (this process) is alive
    (got,) = detail.trials
    assert (got.number, got.run_id, got.params, got.state, got.value, got.intermediate) == (
        0, run.id, {"agent.gamma": 0.95}, "complete", 80.0, [(1000, 20.5), (3000, 80.0)])
    assert got.finished_at is not None
    for reference in ("search:latest", "search:sweep", "search:sa00000001", "search:sa"):
        assert registry.resolve_search(reference).id == search.id
    with pytest.raises(RunReferenceError, match="only 1 searches"):
        registry.resolve_search("search:latest~1")
    registry.finish_search(search.id, status="finished", importance_json='{"agent.gamma": 1.0}')
    ((listed, ended, best),) = registry.list_searches()
    assert (listed.status, ended, best) == ("finished", 1, 80.0)
    assert registry.get_search(search.id).search.to_json()["importance"] == {"agent.gamma": 1.0}
    registry.delete_run(run.id)
    (kept,) = registry.get_search(search.id).trials
    assert kept.run_id is None and kept.value == 80.0  # the trial's record is the search's


def test_a_search_whose_driver_died_reads_crashed(registry: Registry) -> None:
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    registry.create_search(search_id="sc00000003", name=None, spec_name="x", spec_json="{}", space_json="{}",
                           settings_json="{}", host=socket.gethostname(), pid=child.pid)
    assert registry.resolve_search("search:latest").status == "crashed"
    registry.reopen_search("sc00000003", host=socket.gethostname(), pid=os.getpid())
    assert registry.resolve_search("search:latest").status == "running"
