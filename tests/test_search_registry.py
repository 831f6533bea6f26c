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
from rlrun.testhooks import HEARTBEAT_ENV

pytest_plugins = ["postgres_server"]


@pytest.fixture(params=["sqlite", "postgresql"])
def registry(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Registry]:
    url = request.getfixturevalue("postgres_url") if request.param == "postgresql" else None
    with Registry.open(tmp_path / "home", url) as opened:
        yield opened


def test_a_search_and_its_trials_round_trip(registry: Registry) -> None:
    run = registry.create_run(
        run_id="ra00000001",
        name=None,
        spec_name="reinforce_cartpole",
        algorithm="reinforce",
        env_id="CartPole-v1",
        max_frame=3000,
        seed=0,
        num_sessions=1,
        spec_json="{}",
        host=socket.gethostname(),
        pid=os.getpid(),
    )
    search = registry.create_search(
        search_id="sa00000001",
        name="sweep",
        spec_name="reinforce_cartpole",
        spec_json="{}",
        space_json='{"agent.gamma": {"uniform": [0.9, 0.99]}}',
        settings_json=json.dumps({"trials": 2, "metric": "eval_mean"}),
        host=socket.gethostname(),
        pid=os.getpid(),
    )
    with pytest.raises(BadInput, match="a search named 'sweep' already exists"):
        registry.create_search(
            search_id="sb00000002",
            name="sweep",
            spec_name="x",
            spec_json="{}",
            space_json="{}",
            settings_json="{}",
            host=None,
            pid=None,
        )
    trial = registry.add_trial(search.id, number=0, run_id=run.id, params_json='{"agent.gamma": 0.95}')
    registry.record_trial(trial.id, intermediate_json="[[1000, 20.5]]", system_attrs_json='{"completed_rung_0": 20.5}')
    registry.record_trial(
        trial.id, intermediate_json="[[1000, 20.5], [3000, 80.0]]", system_attrs_json="{}", state="complete", value=80.0
    )
    detail = registry.get_search(search.id)
    assert detail.search.status == "running"  # its driver (this process) is alive
    (got,) = detail.trials
    assert (got.number, got.run_id, got.params, got.state, got.value, got.intermediate) == (
        0,
        run.id,
        {"agent.gamma": 0.95},
        "complete",
        80.0,
        [(1000, 20.5), (3000, 80.0)],
    )
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
    registry.create_search(
        search_id="sc00000003",
        name=None,
        spec_name="x",
        spec_json="{}",
        space_json="{}",
        settings_json="{}",
        host=socket.gethostname(),
        pid=child.pid,
    )
    assert registry.resolve_search("search:latest").status == "crashed"
    registry.reopen_search("sc00000003", host=socket.gethostname(), pid=os.getpid())
    assert registry.resolve_search("search:latest").status == "running"


def _set(registry: Registry, search_id: str, **values: object) -> None:
    """Columns of a search's row written as another driver (on another host) would have."""
    with registry._transaction(write=True) as tx:
        assignments = ", ".join(f"{column} = :{column}" for column in values)
        tx.execute(f"UPDATE searches SET {assignments} WHERE id = :id", {**values, "id": search_id})


def test_a_search_lives_by_its_heartbeat_on_the_database_clock_whatever_its_host(registry: Registry) -> None:
    """A driver on another host (its pid cannot be checked from here) is running while it heartbeats
    and crashed once silent past the limit; its own heartbeat says whether the search is still its."""
    from rlrun.registry import stale_after_seconds

    registry.create_search(
        search_id="sd00000004",
        name=None,
        spec_name="x",
        spec_json="{}",
        space_json="{}",
        settings_json="{}",
        host="another-host",
        pid=4242,
    )
    assert registry.resolve_search("search:latest").status == "running"
    assert registry.heartbeat_search("sd00000004", host="another-host", pid=4242)
    stamped = registry.get_search("sd00000004").search.heartbeat_at
    assert stamped is not None and registry.list_searches()[0][0].status == "running"
    _set(registry, "sd00000004", heartbeat_at=stamped - stale_after_seconds() - 5)
    assert registry.resolve_search("search:latest").status == "crashed"  # killed -9, host lost, frozen
    assert registry.get_search("sd00000004").search.status == "crashed"
    assert registry.list_searches()[0][0].status == "crashed"
    registry.reopen_search("sd00000004", host=socket.gethostname(), pid=os.getpid())  # `resume search:`
    assert registry.resolve_search("search:latest").status == "running"
    assert not registry.heartbeat_search("sd00000004", host="another-host", pid=4242), "superseded"
    registry.finish_search("sd00000004", status="interrupted", error="the Ray cluster was lost")
    assert registry.resolve_search("search:latest").status == "interrupted"


def test_a_drivers_heartbeat_thread_beats_and_notices_a_takeover(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from rlrun.search import heartbeat

    monkeypatch.setenv(HEARTBEAT_ENV, "0.05")
    home = tmp_path / "home"
    with Registry.open(home) as registry:
        registry.create_search(
            search_id="se00000005",
            name=None,
            spec_name="x",
            spec_json="{}",
            space_json="{}",
            settings_json="{}",
            host="driver-host",
            pid=7,
        )
        first = registry.get_search("se00000005").search.heartbeat_at
        with heartbeat.DriverHeartbeat(
            home, f"sqlite:///{home / 'registry.sqlite'}", "se00000005", host="driver-host", pid=7
        ) as beating:
            deadline = time.monotonic() + 20
            while registry.get_search("se00000005").search.heartbeat_at == first and time.monotonic() < deadline:
                time.sleep(0.05)
            assert registry.get_search("se00000005").search.heartbeat_at > first
            assert not beating.superseded
            registry.reopen_search("se00000005", host="other-host", pid=8)
            while not beating.superseded and time.monotonic() < deadline:
                time.sleep(0.05)
            assert beating.superseded


def test_a_runs_trial_is_recorded_with_it_and_both_manifests_say_it(registry: Registry) -> None:
    """`create_run(trial=...)` writes the run and its trial row in one transaction; the search's
    manifest (searches/<id>.json) and the run's run.json both name the link, and read back as the
    registry holds them."""
    from rlrun import paths
    from rlrun.registry import read_manifest
    from rlrun.registry.manifest import read_search_manifest
    from rlrun.registry.records import TrialLink

    search = registry.create_search(
        search_id="sf00000006",
        name="linked",
        spec_name="x",
        spec_json='{"a": 1}',
        space_json='{"agent.gamma": {"uniform": [0.9, 0.99]}}',
        settings_json='{"trials": 2}',
        host=socket.gethostname(),
        pid=os.getpid(),
    )
    run = registry.create_run(
        run_id="rf00000006",
        name=None,
        spec_name="x",
        algorithm="reinforce",
        env_id="CartPole-v1",
        max_frame=3000,
        seed=0,
        num_sessions=1,
        spec_json="{}",
        host=socket.gethostname(),
        pid=os.getpid(),
        trial=TrialLink(search.id, 0, '{"agent.gamma": 0.95}'),
    )
    trial = registry.trial_of(search.id, 0)
    assert (trial.run_id, trial.params, trial.state) == (run.id, {"agent.gamma": 0.95}, "running")
    registry.record_trial(
        trial.id,
        intermediate_json="[[1000, 20.5]]",
        system_attrs_json='{"completed_rung_0": 20.5}',
        state="complete",
        value=20.5,
    )
    assert read_manifest(paths.run_dir(registry.home, run.id)).trial == {
        "search_id": search.id,
        "number": 0,
        "params": {"agent.gamma": 0.95},
    }
    written = read_search_manifest(paths.search_manifest(registry.home, search.id))
    stored = registry.get_search(search.id)
    assert written.search == stored.search
    assert written.trials == [
        {k: v for k, v in t._asdict().items() if k not in ("id", "search_id")} for t in stored.trials
    ]
    # A second run for the same trial (its first was deleted) relinks the row, not a second one.
    registry.delete_run(run.id)
    assert read_search_manifest(paths.search_manifest(registry.home, search.id)).trials[0]["run_id"] is None
    again = registry.create_run(
        run_id="rg00000007",
        name=None,
        spec_name="x",
        algorithm="reinforce",
        env_id="CartPole-v1",
        max_frame=3000,
        seed=0,
        num_sessions=1,
        spec_json="{}",
        host=None,
        pid=None,
        trial=TrialLink(search.id, 0, '{"agent.gamma": 0.95}'),
    )
    assert [t.run_id for t in registry.get_search(search.id).trials] == [again.id]


def test_resume_refuses_a_search_whose_driver_beats_elsewhere_and_takes_one_gone_silent(tmp_path: Path) -> None:
    """`resume search:` judges the driver by its heartbeat, not by a pid on this host: one beating on
    another host is refused; once silent past the limit, the search is resumed (here: nothing left)."""
    from rlrun.registry import stale_after_seconds
    from rlrun.search import Settings, resume_search
    from rlrun.spec import builtin_document, validate_spec

    home = tmp_path / "home"
    spec = json.dumps(validate_spec(builtin_document("reinforce_cartpole")).to_json())
    with Registry.open(home) as registry:
        search = registry.create_search(
            search_id="sh00000008",
            name=None,
            spec_name="reinforce_cartpole",
            spec_json=spec,
            space_json='{"agent.gamma": {"uniform": [0.9, 0.99]}}',
            settings_json=json.dumps(Settings(trials=1).to_json()),
            host="another-host",
            pid=os.getpid(),
        )  # a pid alive here, on purpose: it is another host's
        trial = registry.add_trial(search.id, number=0, run_id=None, params_json='{"agent.gamma": 0.95}')
        registry.record_trial(trial.id, intermediate_json="[]", system_attrs_json="{}", state="failed", note="x")
    with pytest.raises(BadInput, match="search sh00000008 is still running"):
        resume_search("search:latest", home=home)
    with Registry.open(home) as registry:
        _set(
            registry,
            search.id,
            heartbeat_at=registry.get_search(search.id).search.heartbeat_at - stale_after_seconds() - 5,
        )
    assert resume_search("search:latest", home=home).nothing_to_do


def test_writers_of_one_search_take_turns_so_its_manifest_ends_as_the_newest_state(
    registry: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two connections scoring different trials of one search at once (a driver and a stale one, or
    trials recorded from threads): each rewrites the search's manifest from the rows it sees, so
    unless they take turns (SQLite's BEGIN IMMEDIATE; the search's row lock on PostgreSQL) one can
    write a manifest without the other's last commit, last. In a home in object storage that
    manifest is what is uploaded: each upload here takes 20 ms, as a PUT to a store far away does."""
    import threading
    import time

    from rlrun import paths, storage
    from rlrun.registry.manifest import read_search_manifest

    upload = storage.publish
    monkeypatch.setattr(storage, "publish", lambda path: (time.sleep(0.02), upload(path)))

    registry.create_search(
        search_id="sa00000001",
        name=None,
        spec_name="reinforce_cartpole",
        spec_json="{}",
        space_json="{}",
        settings_json="{}",
        host=None,
        pid=None,
    )
    trials = [registry.add_trial("sa00000001", number=n, run_id=None, params_json="{}").id for n in range(2)]
    failures: list[BaseException] = []

    def score(trial_id: int) -> None:
        try:
            with Registry.open(registry.home, registry.url) as own:
                for step in range(1, 26):
                    own.record_trial(
                        trial_id, intermediate_json=json.dumps([[step, float(step)]]), system_attrs_json="{}"
                    )
        except BaseException as error:  # shown by the assertion below
            failures.append(error)

    threads = [threading.Thread(target=score, args=(trial_id,)) for trial_id in trials]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    written = read_search_manifest(paths.search_manifest(registry.home, "sa00000001"))
    assert [json.loads(t["intermediate_json"]) for t in written.trials] == [[[25, 25.0]], [[25, 25.0]]]


def test_a_search_stop_asks_its_running_trials_stands_when_repeated_and_ends_with_a_reopen(registry: Registry) -> None:
    """`rlrun stop search:`'s row: the driver's heartbeat reads it; each request asks the search's
    trials whose runs are running to stop (a trial started after the first request included), never
    another search's run or an ended one; a second request keeps the first one's time; a resume
    (reopen) clears it."""

    def run(run_id: str) -> str:
        return registry.create_run(
            run_id=run_id,
            name=None,
            spec_name="reinforce_cartpole",
            algorithm="reinforce",
            env_id="CartPole-v1",
            max_frame=3000,
            seed=0,
            num_sessions=1,
            spec_json="{}",
            host=socket.gethostname(),
            pid=os.getpid(),
        ).id

    def search(search_id: str) -> str:
        return registry.create_search(
            search_id=search_id,
            name=None,
            spec_name="reinforce_cartpole",
            spec_json="{}",
            space_json="{}",
            settings_json=json.dumps({"trials": 3, "metric": "eval_mean"}),
            host=socket.gethostname(),
            pid=os.getpid(),
        ).id

    stopped, bystander = search("sd00000001"), search("se00000001")
    ended, running, other = run("rd00000001"), run("rd00000002"), run("re00000001")
    registry.finish_run(ended, status="finished")
    registry.add_trial(stopped, number=0, run_id=ended, params_json="{}")
    registry.add_trial(stopped, number=1, run_id=running, params_json="{}")
    registry.add_trial(bystander, number=0, run_id=other, params_json="{}")
    assert not registry.search_stop_requested(stopped)
    assert registry.request_search_stop(stopped) is None
    asked = registry.resolve_search(f"search:{stopped}").stop_requested_at
    assert asked is not None and registry.search_stop_requested(stopped)
    assert [registry.stop_requested(r) for r in (ended, running, other)] == [False, True, False]
    later = run("rd00000003")  # started by the driver as the request came
    registry.add_trial(stopped, number=2, run_id=later, params_json="{}")
    assert registry.request_search_stop(stopped) == asked
    assert registry.stop_requested(later) and not registry.search_stop_requested(bystander)
    registry.reopen_search(stopped, host=socket.gethostname(), pid=os.getpid())
    assert not registry.search_stop_requested(stopped)
    assert registry.resolve_search(f"search:{stopped}").stop_requested_at is None
    registry.finish_search(bystander, status="finished")  # ended since the caller looked: nothing to stop
    assert registry.request_search_stop(bystander) is None and not registry.search_stop_requested(bystander)
