"""Hyper-parameter search (issue 15): a real 6-trial search of reinforce_cartpole's learning rate and
entropy coefficient at a tiny budget, stopped by SIGTERM and by kill -9 of the driver in the middle of
a trial, then resumed: the same trials are suggested, scored and pruned, and every trial's run ends
in the same snapshot bit for bit as in the search that was never interrupted."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import zygote
from helpers import PROBE, cli_env, invoke, rlrun, search_spec, trials
from same_run import assert_same_run, assert_tensors_equal, built_once, final_state, wait_for

from rlrun.registry import Registry
from rlrun.testhooks import CRASH_ENV, HEARTBEAT_ENV, HOLD_ENV, SIGNAL_AT_ENV, SLOW_EVALUATION_ENV

pytestmark = pytest.mark.slow

# The median pruner after one trial: in this search it prunes three trials at their first evaluation.
SEARCH = ["--trials", "6", "--prune-after", "1"]


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The search that was never interrupted: its home and its spec file."""

    def searched(folder: Path) -> None:
        done = rlrun(folder / "runs", "search", str(search_spec(folder)), *SEARCH)
        assert done.code == 0, done.stderr

    folder = built_once(
        tmp_path_factory, ["search", search_spec(tmp_path_factory.mktemp("spec")).read_text(), *SEARCH], searched
    )
    return folder / "runs", folder / "search.json"


def assert_same_search(home_a: Path, home_b: Path) -> None:
    """Trial for trial: the same parameters, scores at each evaluation, ends and final snapshots."""
    a, b = trials(home_a), trials(home_b)
    assert [t.number for t in a] == [t.number for t in b] == list(range(6))
    for x, y in zip(a, b, strict=True):
        assert (x.params, x.state, x.value, x.intermediate, x.note) == (
            y.params,
            y.state,
            y.value,
            y.intermediate,
            y.note,
        ), x.number
        assert x.run_id is not None and y.run_id is not None
        if x.state == "complete":
            assert_same_run(final_state(home_a, x.run_id), final_state(home_b, y.run_id))
        else:  # pruned: stopped with a snapshot at the evaluation that pruned it
            saved = [
                final_state(home, trial.run_id)["sessions"][0]["saved"] for home, trial in ((home_a, x), (home_b, y))
            ]
            assert saved[0].meta.clock.frame == saved[1].meta.clock.frame == x.intermediate[-1][0]
            assert_tensors_equal(saved[0].tensors, saved[1].tensors)
    assert {t.state for t in a} == {"complete", "pruned"}, "the search should both complete and prune trials"


def test_search_scores_prunes_and_reads_back(straight: tuple[Path, Path]) -> None:
    home, _ = straight
    done = trials(home)
    assert len({json.dumps(t.params) for t in done}) == 6
    for trial in done:
        assert 1e-4 <= trial.params["agent.optimizer.lr"] <= 3e-3
        assert 0.0 <= trial.params["agent.entropy_coef"] <= 0.05
        with Registry.open(home, create=False) as registry:
            run = registry.get_run(trial.run_id)
        spec = json.loads(run.spec_revisions[-1].spec_json)
        assert spec["agent"]["optimizer"]["lr"] == trial.params["agent.optimizer.lr"]  # the run trains the trial
        assert "search" not in spec
        finals = [e.mean for e in run.evaluations if e.frame == trial.intermediate[-1][0]]
        assert trial.intermediate[-1][1] == sum(finals) / len(finals)
        if trial.state == "complete":
            assert trial.value == trial.intermediate[-1][1] and run.run.status == "finished"
            assert trial.intermediate[-1][0] == 3000
        else:
            assert trial.state == "pruned" and run.run.status == "preempted" and trial.value is None
            assert trial.note.startswith(f"pruned at frame {trial.intermediate[-1][0]:,}: eval_mean")
            assert trial.intermediate[-1][0] < 3000
    shown = invoke(home, "show", "search:latest")
    assert shown.code == 0 and "best trials:" in shown.stdout and "parameter importance" in shown.stdout
    listed = invoke(home, "ls", "--search", "latest", "--json").json()
    assert [t["number"] for t in listed] == list(range(6)) and listed[0]["params"] == done[0].params
    assert invoke(home, "plot", "search:latest", "-o", str(home / "search.png")).code == 0
    assert (home / "search.png").stat().st_size > 0
    again = invoke(home, "resume", "search:latest")
    assert again.code == 0 and "nothing to do" in again.stderr


def test_search_views_import_neither_optuna_nor_torch(straight: tuple[Path, Path]) -> None:
    home, _ = straight
    probe = PROBE.replace("'sqlalchemy', 'rich'", "'optuna', 'sqlalchemy', 'rich'")
    for args in (["show", "search:latest"], ["ls", "--search", "latest"], ["ls", "--searches", "--json"]):
        done = subprocess.run([sys.executable, "-c", probe, *args], env=cli_env(home), capture_output=True, text=True)
        assert done.stderr.rsplit("HEAVY=", 1)[1].strip() == "", args


def test_sigterm_mid_trial_then_resume_is_the_same_search(straight: tuple[Path, Path], tmp_path: Path) -> None:
    home_a, spec = straight
    home = tmp_path / "runs"
    stopped = zygote.run(["search", str(spec), *SEARCH], env={**cli_env(home), SIGNAL_AT_ENV: "2345"}, timeout=300)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    assert "stopped by signal 15" in stopped.stderr and "Traceback" not in stopped.stderr
    partial = trials(home)
    assert [t.state for t in partial] == ["running"], "stopped in the first trial, after its frame 2345"
    listed = rlrun(home, "ls", "--searches", "--json").json()
    assert listed[0]["status"] == "preempted"
    resumed = invoke(home, "resume", "search:latest")
    assert resumed.code == 0, resumed.stderr
    assert_same_search(home_a, home)
    assert_continued_from_a_snapshot(home, partial[0].run_id)


def assert_continued_from_a_snapshot(home: Path, run_id: str) -> None:
    """The interrupted trial's run went on from its snapshot (an exact resume), not from frame 0."""
    with Registry.open(home, create=False) as registry:
        attempts = registry.get_run(run_id).attempts
    assert [a.kind for a in attempts] == ["train", "resume"]
    assert attempts[1].start_frame > 0 and not attempts[1].approximate


def test_kill_9_of_the_driver_mid_search_then_resume_is_the_same_search(
    straight: tuple[Path, Path], tmp_path: Path
) -> None:
    home_a, spec = straight
    home = tmp_path / "runs"
    process = zygote.start(
        ["search", str(spec), *SEARCH],
        env=cli_env(home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_for(lambda: _third_trial_has_a_snapshot(home), process)
    os.killpg(process.pid, signal.SIGKILL)
    assert process.wait(timeout=30) == -signal.SIGKILL
    assert rlrun(home, "show", "search:latest", "--json").json()["search"]["status"] == "crashed"
    interrupted = trials(home)[2]
    with Registry.open(home, create=False) as registry:
        detail = registry.get_run(interrupted.run_id)
    mid_trial = detail.run.status == "crashed" and max(c.frame for c in detail.checkpoints) < 3000
    resumed = invoke(home, "resume", "search:latest")
    assert resumed.code == 0, resumed.stderr
    assert_same_search(home_a, home)
    if mid_trial:  # (the kill may, rarely, land after the trial's last snapshot: nothing left to resume)
        assert_continued_from_a_snapshot(home, interrupted.run_id)


@pytest.mark.any_home
def test_a_lost_registry_rebuilt_after_a_kill_9_gives_back_the_same_search(
    straight: tuple[Path, Path], home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver killed -9 mid-search, then the registry file lost: `rlrun db rebuild` restores the
    search and its trials (from searches/<id>.json and the trial runs' run.json), `ls --searches` and
    `show search:` say what they said before, and the resumed search is the search never interrupted.
    In object storage, every command (the rebuild too) has a working copy of its own: what it reads
    it reads from the store."""
    home_a, spec = straight
    monkeypatch.delenv("RLRUN_DB", raising=False)  # each home's registry is its own file, read from here
    held = home.parent / "held"
    # The third session to reach frame 1,000 (its evaluation and snapshot written) holds once every
    # file it wrote is in the store: a kill -9 anywhere else could fall between a registry write and
    # its manifest's PUT, which no rebuild can know of.
    process = zygote.start(
        ["search", str(spec), *SEARCH],
        env={**cli_env(home), HOLD_ENV: f"1000#3@{held}"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_for(held.exists, process)
    os.killpg(process.pid, signal.SIGKILL)
    assert process.wait(timeout=30) == -signal.SIGKILL
    listed, shown = _search_views(home)
    assert listed[0]["status"] == shown["search"]["status"] == "crashed"
    runs = _run_views(home)
    for lost in home.glob("registry.sqlite*"):
        lost.unlink()
    rebuilt = rlrun(home, "db", "rebuild", "--json")
    assert rebuilt.code == 0, rebuilt.stderr
    report = rebuilt.json()
    assert report["problems"] == [] and report["searches"] == [listed[0]["id"]]
    assert _search_views(home) == (listed, shown)
    assert _run_views(home) == runs
    resumed = invoke(home, "resume", f"search:{listed[0]['id']}")
    assert resumed.code == 0, resumed.stderr
    assert_same_search(home_a, home)


def _search_views(home: Path) -> tuple[list[dict], dict]:
    """`ls --searches` and `show search:latest`, as JSON, without the driver's heartbeat (the
    manifest is not rewritten at each beat, so a rebuilt registry holds an older one)."""
    listed = rlrun(home, "ls", "--searches", "--json").json()
    shown = rlrun(home, "show", "search:latest", "--json").json()
    for search in (*listed, shown["search"]):
        search.pop("heartbeat_at")
    return listed, shown


def _run_views(home: Path) -> list[dict]:
    """`ls --all` as JSON: the trials' runs; of the one the kill interrupted, what a rebuild can
    know (its progress and training time were heartbeats past its newest snapshot)."""
    listed = rlrun(home, "ls", "--all", "--json").json()
    for run in listed:
        if run["status"] == "crashed":
            for key in ("frames_done", "session_frame", "training_seconds"):
                run.pop(key)
    return listed


@pytest.mark.parametrize("step", ["run-recorded#2", "manifest-written#2"])
def test_a_kill_between_a_trials_run_and_its_trial_row_leaves_no_unlinked_run(
    straight: tuple[Path, Path], tmp_path: Path, step: str
) -> None:
    """The driver killed just after the second trial's run was recorded: the run and its trial row
    are one transaction, so the run is the trial's, and the resumed search trains it (no orphan run
    beside a new one) and is the search never interrupted."""
    home_a, spec = straight
    home = tmp_path / "runs"
    killed = zygote.run(["search", str(spec), *SEARCH], env={**cli_env(home), CRASH_ENV: step}, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with Registry.open(home, create=False) as registry:
        runs = {summary.id for summary in registry.list_runs(limit=None)}
    linked = {t.number: t.run_id for t in trials(home)}
    assert len(runs) == 2 and set(linked.values()) == runs and linked[1] is not None
    resumed = invoke(home, "resume", "search:latest")
    assert resumed.code == 0, resumed.stderr
    assert_same_search(home_a, home)
    with Registry.open(home, create=False) as registry:
        every_run = {summary.id for summary in registry.list_runs(limit=None)}
    assert every_run == {t.run_id for t in trials(home)}, "every run is a trial's"
    assert trials(home)[1].run_id == linked[1], "the trial's first run trained it"


def _third_trial_has_a_snapshot(home: Path) -> bool:
    return _trials_with_a_snapshot(home) >= {2}


def _trials_with_a_snapshot(home: Path) -> set[int]:
    database = home / "registry.sqlite"
    if not database.exists():
        return set()
    try:
        with sqlite3.connect(database) as db:
            found = db.execute(
                "SELECT DISTINCT t.number FROM trials t JOIN sessions s ON s.run_id = t.run_id"
                " JOIN checkpoints c ON c.session_id = s.id"
            ).fetchall()
    except sqlite3.OperationalError:  # the schema is still being created
        return set()
    return {number for (number,) in found}


PARALLEL = ["--trials", "3", "--parallel", "2", "--pruner", "none"]
"""Two trials at a time, each in a worker process (a fresh interpreter), three in all: a stop meets
the first two in flight, and the resume continues them and starts the third."""


def test_parallel_trials_stopped_by_sigterm_resume_trial_by_trial(straight: tuple[Path, Path], tmp_path: Path) -> None:
    """Two trials at a time, each in a worker process: SIGTERM to the driver alone stops both with a
    snapshot; resumed, each trial is the run its parameters give, bit for bit (which trials a
    suggestion sees depends on timing, so the guarantee is per trial)."""
    home_a, spec = straight
    home = tmp_path / "runs"
    process = zygote.start(
        ["search", str(spec), *PARALLEL],
        env=cli_env(home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    wait_for(lambda: _trials_with_a_snapshot(home) >= {0, 1}, process)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    stopped = {t.number: t for t in trials(home)}
    assert {stopped[0].state, stopped[1].state} <= {"running", "complete"}
    resumed = invoke(home, "resume", "search:latest")
    assert resumed.code == 0, resumed.stderr
    done = trials(home)
    assert [t.state for t in done] == ["complete"] * 3
    straight_first = trials(home_a)[0]  # the first suggestion sees no ended trial, in any search
    assert done[0].params == straight_first.params and done[0].value == straight_first.value
    assert_same_run(final_state(home_a, straight_first.run_id), final_state(home, done[0].run_id))
    # Trial 1: the run of its parameters, trained straight.
    base = tmp_path / "base.json"
    document = json.loads(spec.read_text())
    del document["search"]
    base.write_text(json.dumps(document))
    edits = [arg for path, value in done[1].params.items() for arg in ("--set", f"{path}={json.dumps(value)}")]
    alone = tmp_path / "alone"
    assert invoke(alone, "train", str(base), *edits).code == 0
    assert_same_run(final_state(alone, "latest"), final_state(home, done[1].run_id))


# Trials that last seconds (each evaluation a second longer, which changes nothing trained) and a
# driver and sessions that beat five times a second: a stop lands in the middle of a trial.
SLOW_TRIALS = {SLOW_EVALUATION_ENV: "1", HEARTBEAT_ENV: "0.2"}


def test_rlrun_stop_of_a_search_mid_trial_then_resume_is_the_same_search(
    straight: tuple[Path, Path], tmp_path: Path
) -> None:
    """`rlrun stop search:latest` from another process: the driver starts no more trials, its trial
    in flight stops with a snapshot, the command exits 128+15 and the search reads preempted; a
    second stop has nothing to stop; resumed, it is the search never stopped, bit for bit."""
    home_a, spec = straight
    home = tmp_path / "runs"
    process = zygote.start(
        ["search", str(spec), *SEARCH],
        env={**cli_env(home), **SLOW_TRIALS},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    wait_for(lambda: _third_trial_has_a_snapshot(home), process)
    asked = rlrun(home, "stop", "search:latest", "--json")
    assert asked.code == 0, asked.stderr
    assert asked.json()["stop_requested_at"] is not None and "stop requested" in asked.stderr
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert "Traceback" not in stderr
    shown = rlrun(home, "show", "search:latest", "--json").json()
    assert shown["search"]["status"] == "preempted"
    stopped = trials(home)
    assert len(stopped) < 6 and stopped[-1].state == "running", [t.state for t in stopped]
    again = rlrun(home, "stop", "search:latest")
    assert again.code == 0 and "is preempted: nothing to stop; continue it with `rlrun resume search:" in again.stderr
    resumed = invoke(home, "resume", "search:latest")
    assert resumed.code == 0, resumed.stderr
    assert_same_search(home_a, home)
    assert stopped[-1].run_id is not None
    assert_continued_from_a_snapshot(home, stopped[-1].run_id)


@pytest.mark.parametrize("target", ["search:latest", "trial 0's run"])
def test_rlrun_stop_of_parallel_trials_stops_the_search(
    straight: tuple[Path, Path], tmp_path: Path, target: str
) -> None:
    """Two trials at a time in worker processes: `rlrun stop search:`, or `rlrun stop` of one
    trial's run, stops both with snapshots and the search reads preempted (a trial that ends
    preempted never leaves a search "finished"); resumed, every trial completes, trial 0 (whose
    values no history shapes) bit for bit the straight search's."""
    home_a, spec = straight
    home = tmp_path / "runs"
    process = zygote.start(
        ["search", str(spec), *PARALLEL],
        env={**cli_env(home), **SLOW_TRIALS},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    wait_for(lambda: _trials_with_a_snapshot(home) >= {0, 1}, process)
    stopped = rlrun(home, "stop", target if target.startswith("search:") else str(trials(home)[0].run_id))
    assert stopped.code == 0 and "stop requested" in stopped.stderr, stopped.stderr
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    assert rlrun(home, "ls", "--searches", "--json").json()[0]["status"] == "preempted"
    assert [t.state for t in trials(home)][:2] == ["running", "running"], "both stopped in flight"
    resumed = invoke(home, "resume", "search:latest")
    assert resumed.code == 0, resumed.stderr
    done = trials(home)
    assert [t.state for t in done] == ["complete"] * 3
    straight_first = trials(home_a)[0]
    assert done[0].params == straight_first.params and done[0].value == straight_first.value
    assert_same_run(final_state(home_a, straight_first.run_id), final_state(home, done[0].run_id))


def test_kill_9_of_a_trial_worker_fails_the_search_and_resume_continues_that_trial(
    straight: tuple[Path, Path], tmp_path: Path
) -> None:
    """A worker (a parallel trial) killed by kill -9: the other trials go on, the search ends failed
    naming the trial, and `rlrun resume search:...` continues that trial from its snapshot, exactly."""
    home_a, spec = straight
    home = tmp_path / "runs"
    process = zygote.start(
        ["search", str(spec), *PARALLEL],
        env=cli_env(home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    wait_for(lambda: 0 in _trials_with_a_snapshot(home), process)
    with Registry.open(home, create=False) as registry:
        run_id = next(
            t.run_id for t in registry.get_search(registry.resolve_search("search:latest").id).trials if t.number == 0
        )
        worker = registry.get_run(run_id).sessions[0].pid  # the worker trains its one session itself
    os.kill(worker, signal.SIGKILL)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 1, stderr
    assert "trial 0's worker process exited with code -9" in stderr
    assert trials(home)[0].state == "running"
    resumed = invoke(home, "resume", "search:latest")
    assert resumed.code == 0, resumed.stderr
    done = trials(home)
    assert [t.state for t in done] == ["complete"] * 3
    assert_same_run(final_state(home_a, trials(home_a)[0].run_id), final_state(home, done[0].run_id))


def test_a_trial_whose_values_cannot_train_fails_alone(tmp_path: Path) -> None:
    """A grid over env ids where one env does not fit the algorithm: that trial fails, recorded with
    why and without a run; the other trains; the search finishes."""
    spec = search_spec(tmp_path)
    document = json.loads(spec.read_text())
    document["search"] = {"env.id": {"grid": ["CartPole-v1", "Pendulum-v1"]}}
    spec.write_text(json.dumps(document))
    home = tmp_path / "runs"
    done = invoke(home, "search", str(spec), "--json")
    assert done.code == 0, done.stderr
    result = done.json()
    by_env = {t["params"]["env.id"]: t for t in result["trials"]}
    assert by_env["CartPole-v1"]["state"] == "complete" and by_env["CartPole-v1"]["run_id"] is not None
    assert by_env["Pendulum-v1"]["state"] == "failed" and by_env["Pendulum-v1"]["run_id"] is None
    assert "reinforce cannot train on Pendulum-v1" in by_env["Pendulum-v1"]["note"]
    assert result["status"] == "finished"


def test_successive_halving_keeps_its_rungs_in_the_registry(tmp_path: Path) -> None:
    """`--pruner halving` over a grid: each trial records the rungs it reached (Optuna's own notes,
    kept so a resumed search's pruner sees what the first driver's did), and a trial that fell out
    of the best third at a rung is pruned there."""
    spec = search_spec(tmp_path)
    document = json.loads(spec.read_text())
    document["search"] = {"agent.optimizer.lr": {"grid": [0.003, 0.000001, 0.0000001]}}
    spec.write_text(json.dumps(document))
    home = tmp_path / "runs"
    done = invoke(home, "search", str(spec), "--pruner", "halving")
    assert done.code == 0, done.stderr
    ended = trials(home)
    assert sorted(t.params["agent.optimizer.lr"] for t in ended) == [0.0000001, 0.000001, 0.003]  # the grid, once each
    for trial in ended:
        attrs = json.loads(trial.system_attrs_json)
        assert "completed_rung_0" in attrs and attrs["completed_rung_0"] == trial.intermediate[0][1]
        if trial.state == "pruned":
            assert trial.note.startswith("pruned at frame") and "halving" in trial.note


def test_train_refuses_a_search_spec_and_nothing_is_written(tmp_path: Path) -> None:
    spec = search_spec(tmp_path)
    refused = invoke(tmp_path / "runs", "train", str(spec))
    assert refused.code == 2 and "rlrun search SPEC" in refused.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("home_kind", ["s3"], indirect=True)
def test_a_search_whose_home_is_in_object_storage_is_the_same_search(
    straight: tuple[Path, Path], home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same search with its home in an S3 bucket (a loopback server; the registry in a local
    file): the same trials, scores, prunings and final snapshots, each read back from the store."""
    home_a, spec = straight
    done = invoke(home, "search", str(spec), *SEARCH)
    assert done.code == 0, done.stderr
    monkeypatch.delenv("RLRUN_DB")  # each home's registry is its own file, read from here
    assert_same_search(home_a, home)
