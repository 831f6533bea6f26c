"""Population-based training (issue 29): a real population of four PPO members on CartPole at a tiny
budget, with several exploits, killed with kill -9 of the driver at a random moment and resumed, ends
member for member, segment for segment, in the same snapshots bit for bit as the population never
interrupted; a DQN member's fork shares its parent's replay segments (hard links, not copies). Two
members at a time (`--parallel 2`, issue pbtpar; a population of two generations): the same population
bit for bit, straight, stopped mid-generation (kill -9, SIGTERM, `rlrun stop`) and resumed, or with a
worker lost."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import zygote
from helpers import cli_env, invoke, rlrun, trials
from same_run import assert_same_run, built_once, final_state, wait_for

from rlrun import paths
from rlrun.registry import Registry
from rlrun.spec import builtin_document, validate_spec
from rlrun.spec.consistency import check_edit
from rlrun.testhooks import FREEZE_ENV, HEARTBEAT_ENV, SLOW_EVALUATION_ENV

pytestmark = pytest.mark.slow

PBT = ["--scheduler", "pbt", "--population", "4", "--interval", "1000"]
SPACE = {"agent.optimizer.lr": {"loguniform": [1e-4, 3e-3]}, "agent.entropy_coef": {"uniform": [0.0, 0.05]}}


def pbt_spec(folder: Path, generations: int = 3) -> Path:
    """ppo_cartpole, tiny: `generations` generations of 1,000 frames, a snapshot and an evaluation every 500."""
    document = builtin_document("ppo_cartpole")
    document["agent"].update(n_steps=16, n_epochs=2, batch_size=64)
    document["env"]["num_envs"] = 4
    document["meta"].update(
        max_frame=1000 * generations,
        eval_frequency=500,
        checkpoint_frequency=500,
        num_eval_episodes=2,
        log_frequency=250,
    )
    document["search"] = SPACE
    path = folder / f"pbt-{generations}.json"
    path.write_text(json.dumps(document))
    return path


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The population never interrupted: its home and its spec file."""

    def searched(folder: Path) -> None:
        done = rlrun(folder / "runs", "search", str(pbt_spec(folder)), *PBT)
        assert done.code == 0, done.stderr

    folder = built_once(
        tmp_path_factory, ["pbt", pbt_spec(tmp_path_factory.mktemp("spec")).read_text(), *PBT], searched
    )
    return folder / "runs", folder / "pbt-3.json"


def lineage(home: Path) -> list[dict[str, Any]]:
    """Each segment's place in the population, by trial number, its parent run named by trial number
    (run ids differ between homes)."""
    with Registry.open(home, create=False) as registry:
        search = registry.list_searches(1)[0][0]
        detail = registry.get_search(search.id)
        lines = registry.get_lineage(search.id)
    numbers = {t.id: t.number for t in detail.trials}
    by_run = {t.run_id: t.number for t in detail.trials}
    return [
        {
            "number": numbers[line.trial_id],
            "member": line.member,
            "generation": line.generation,
            "parent_member": line.parent_member,
            "parent": by_run.get(line.parent_run_id),
            "frame": line.frame,
            "mutated": line.mutated,
        }
        for line in sorted(lines, key=lambda line: numbers[line.trial_id])
    ]


def assert_same_population(home_a: Path, home_b: Path, generations: int = 3) -> None:
    a, b = trials(home_a), trials(home_b)
    assert [t.number for t in a] == [t.number for t in b] == list(range(4 * generations))
    assert lineage(home_a) == lineage(home_b)
    for x, y in zip(a, b, strict=True):
        assert (x.params, x.state, x.value, x.intermediate) == (y.params, y.state, y.value, y.intermediate), x.number
        assert x.state == "complete" and x.run_id is not None and y.run_id is not None
        assert_same_run(final_state(home_a, x.run_id), final_state(home_b, y.run_id))


def test_population_exploits_by_exact_forks_with_consistent_edits(straight: tuple[Path, Path]) -> None:
    home, _ = straight
    lines = lineage(home)
    exploits = [line for line in lines if line["parent_member"] not in (None, line["member"])]
    assert len(exploits) >= 2, "the test population should exploit more than once"
    with Registry.open(home, create=False) as registry:
        detail = registry.get_search(registry.list_searches(1)[0][0].id)
        for trial, line in zip(detail.trials, lines, strict=True):
            run = registry.get_run(trial.run_id)
            if line["generation"] == 0:
                assert run.run.parent_id is None
                continue
            parent = detail.trials[line["parent"]]
            assert run.run.parent_id == parent.run_id, "a segment is a fork of the segment it continues"
            assert [a.kind for a in run.attempts] == ["fork"] and run.attempts[0].start_frame == line["frame"]
            # The explored values are written as step schedules: a consistent edit of the parent's past.
            first, last = run.spec_revisions[0], run.spec_revisions[-1]
            before, after = validate_spec(json.loads(first.spec_json)), validate_spec(json.loads(last.spec_json))
            assert [c for c in check_edit(before, after, line["frame"]) if not c.allowed] == []
            for path in line["mutated"]:
                section, *rest = path.split(".")
                value = after.to_json()[section]
                for key in rest:
                    value = value[key]
                assert value["kind"] == "piecewise" and value["points"][-1] == [line["frame"] + 1, trial.params[path]]


def test_ls_and_show_read_the_population(straight: tuple[Path, Path]) -> None:
    home, _ = straight
    listed = rlrun(home, "ls", "--search", "search:latest", "--json").json()
    assert len(listed) == 12
    shown = rlrun(home, "show", "search:latest")
    assert shown.code == 0, shown.stderr
    tree = shown.stdout[shown.stdout.index("lineage (") :]
    exploits = [line for line in lineage(home) if line["parent_member"] not in (None, line["member"])]
    assert tree.count("← m") == len(exploits) and tree.count(" g2 run ") == 4
    as_json = rlrun(home, "show", "search:latest", "--json").json()
    assert [line["member"] for line in as_json["lineage"]] == [0, 1, 2, 3] * 3
    drawn = rlrun(home, "plot", "search:latest", "-o", str(home.parent / "population.png"))
    assert drawn.code == 0, drawn.stderr
    assert (home.parent / "population.png").stat().st_size > 0


@pytest.mark.parametrize("attempt", range(2))
def test_kill_9_of_the_driver_at_a_random_moment_then_resume_is_the_same_population(
    straight: tuple[Path, Path], tmp_path: Path, attempt: int
) -> None:
    home_a, spec = straight
    home = _killed_at_a_random_moment(home_a, spec, tmp_path / "runs")
    resumed = invoke(home, "resume", "search:latest")
    assert resumed.code == 0, resumed.stderr
    assert_same_population(home_a, home)


@pytest.mark.any_home
def test_a_lost_registry_rebuilt_after_a_kill_9_resumes_the_same_population(
    straight: tuple[Path, Path], home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver killed -9, then the registry file lost: `rlrun db rebuild` restores the search, its
    segments and their lineage (from searches/<id>.json), and the resumed population is the one never
    interrupted. In object storage the rebuild reads all of it from the store."""
    home_a, spec = straight
    monkeypatch.delenv("RLRUN_DB", raising=False)  # each home's registry is its own file, read from here
    _killed_at_a_random_moment(home_a, spec, home)
    before = lineage(home)
    for lost in home.glob("registry.sqlite*"):
        lost.unlink()
    rebuilt = rlrun(home, "db", "rebuild", "--json")
    assert rebuilt.code == 0 and rebuilt.json()["problems"] == [], rebuilt.stderr
    assert lineage(home) == before
    resumed = invoke(home, "resume", "search:latest")
    assert resumed.code == 0, resumed.stderr
    assert_same_population(home_a, home)


def _killed_at_a_random_moment(home_a: Path, spec: Path, home: Path) -> Path:
    """`home`, its PBT driver killed -9 once a random number of snapshots were recorded."""
    total = _snapshots(home_a)
    seed = random.SystemRandom().randrange(2**32)
    moment = random.Random(seed).randint(1, total - 2)  # kill once this many snapshots are recorded
    process = zygote.start(
        ["search", str(spec), *PBT],
        env=cli_env(home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_for(lambda: _snapshots(home) >= moment, process)
    os.killpg(process.pid, signal.SIGKILL)
    assert process.wait(timeout=30) == -signal.SIGKILL
    print(f"killed after {moment} snapshots (seed {seed})")  # shown with a failure's output
    return home


def _snapshots(home: Path) -> int:
    database = home / "registry.sqlite"
    if not database.exists():
        return 0
    try:
        with sqlite3.connect(database) as db:
            (count,) = db.execute("SELECT COUNT(*) FROM checkpoints").fetchone()
    except sqlite3.OperationalError:  # the schema is still being created
        return 0
    return int(count)


def test_a_dqn_fork_shares_its_parents_replay_segments(tmp_path: Path) -> None:
    document = builtin_document("dqn_cartpole")
    document["agent"].update(learning_starts=200, train_frequency=16, gradient_steps=1, batch_size=32)
    document["agent"]["memory"]["capacity"] = 5000
    document["meta"].update(
        max_frame=2000, eval_frequency=1000, checkpoint_frequency=1000, num_eval_episodes=2, log_frequency=500
    )
    document["search"] = {"agent.optimizer.lr": {"loguniform": [1e-4, 1e-3]}}
    spec = tmp_path / "dqn.json"
    spec.write_text(json.dumps(document))
    home = tmp_path / "runs"
    done = invoke(
        home, "search", str(spec), "--scheduler", "pbt", "--population", "2", "--interval", "1000", "--quantile", "0.5"
    )
    assert done.code == 0, done.stderr
    (fork,) = [line for line in lineage(home) if line["parent_member"] not in (None, line["member"])]
    segments = trials(home)
    with Registry.open(home, create=False) as registry:
        child = registry.get_run(segments[fork["number"]].run_id)
        parent = registry.get_run(segments[fork["parent"]].run_id)
    first_own = min(child.checkpoints, key=lambda c: c.frame)
    parents_last = max(parent.checkpoints, key=lambda c: c.frame)
    assert parents_last.frame == fork["frame"] and first_own.frame > fork["frame"]
    mine = {p.name: p.stat() for p in (home / first_own.path).glob("logs/*.npy")}
    theirs = {p.name: p.stat() for p in (home / parents_last.path).glob("logs/*.npy")}
    shared = mine.keys() & theirs.keys()
    assert shared, f"no replay segment of the parent's snapshot in the fork's: {sorted(mine)} / {sorted(theirs)}"
    for name in shared:
        assert mine[name].st_ino == theirs[name].st_ino and mine[name].st_nlink >= 2, name
    assert paths.run_dir(home, child.run.id) != paths.run_dir(home, parent.run.id)


# ---------------------------------------------------------------------------------------------
# --parallel K: up to K members of a generation at once, each in a worker process
#
# On a population of two generations (TWO): each generation starts its two worker processes
# (a fresh interpreter each, most of what these tests cost), and two generations hold what a
# stop and a resume can meet: members' first segments, forked ones (after an exploit), and an
# exploit made after the resume. The exploits themselves are the three-generation population's
# (the tests above).

TWO = 2


@pytest.fixture(scope="module")
def straight_two(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The population of TWO generations, one member at a time, never interrupted: its home and its
    spec file (trained in this process: no signal is under test)."""

    def searched(folder: Path) -> None:
        done = invoke(folder / "runs", "search", str(pbt_spec(folder, TWO)), *PBT)
        assert done.code == 0, done.stderr

    spec = pbt_spec(tmp_path_factory.mktemp("spec"), TWO).read_text()
    folder = built_once(tmp_path_factory, ["pbt", spec, *PBT], searched)
    return folder / "runs", folder / f"pbt-{TWO}.json"


@pytest.fixture(scope="module")
def parallel(tmp_path_factory: pytest.TempPathFactory, straight_two: tuple[Path, Path]) -> Path:
    """The same population, two members at a time (two worker processes a generation), never
    interrupted: its home."""

    def searched(folder: Path) -> None:
        done = invoke(folder / "runs", "search", str(straight_two[1]), *PBT, "--parallel", "2")
        assert done.code == 0, done.stderr

    return (
        built_once(tmp_path_factory, ["pbt", straight_two[1].read_text(), *PBT, "--parallel", "2"], searched) / "runs"
    )


def test_a_population_trained_two_members_at_a_time_is_the_population_trained_one_at_a_time(
    straight_two: tuple[Path, Path], parallel: Path
) -> None:
    assert_same_population(straight_two[0], parallel, TWO)
    assert [line["parent_member"] for line in lineage(parallel)[4:]] != [0, 1, 2, 3], "no exploit to compare"
    with Registry.open(parallel, create=False) as registry:
        search = registry.list_searches(1)[0][0]
        runs = [registry.get_run(t.run_id) for t in registry.get_search(search.id).trials]
    assert json.loads(search.settings_json)["parallel"] == 2
    # Each generation in two worker processes, each training every other member's segment (its one
    # session in the worker itself).
    pids = [run.sessions[0].pid for run in runs]
    for generation in range(TWO):
        lanes = pids[4 * generation : 4 * generation + 4]
        assert lanes[0] == lanes[2] != lanes[1] == lanes[3]


@pytest.mark.parametrize(
    "how",
    ["kill -9 of the process group", "kill -9 of the driver", "SIGTERM to the driver", "rlrun stop search:latest"],
)
def test_a_parallel_population_stopped_mid_generation_then_resumed_is_the_same_population(
    straight_two: tuple[Path, Path], tmp_path: Path, how: str
) -> None:
    """Stopped while both members of a random generation train (each with a snapshot), and resumed
    (two at a time again: recorded with the search), member for member the population never
    interrupted. The whole group killed: each segment continues from its last snapshot; the driver
    alone killed: its orphaned workers stop their segments with a snapshot; SIGTERM: the driver
    stops them so, then ends 128 + 15; `rlrun stop search:` from another process: the same, the
    request reaching the driver and the segments through the registry (their heartbeats)."""
    home_a, spec = straight_two
    home = tmp_path / "runs"
    chance = random.SystemRandom()
    generation, delay = chance.randrange(TWO), chance.uniform(0, 2)
    # Slow evaluations (a sleep: the same bits) hold both members' segments in flight for seconds.
    slow = {**cli_env(home), SLOW_EVALUATION_ENV: "1.5", HEARTBEAT_ENV: "0.2"}
    process = zygote.start(
        ["search", str(spec), *PBT, "--parallel", "2"],
        env=slow,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    wait_for(lambda: len({n for n in _in_flight(home) if n // 4 == generation}) >= 2, process, timeout=600)
    time.sleep(delay)  # both segments just started, or one (or both) past its first snapshot
    if how in ("SIGTERM to the driver", "rlrun stop search:latest"):
        if how == "SIGTERM to the driver":
            process.send_signal(signal.SIGTERM)
        else:
            asked = rlrun(home, "stop", "search:latest")
            assert asked.code == 0 and "stop requested" in asked.stderr, asked.stderr
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 128 + signal.SIGTERM, stderr
    else:
        (os.killpg if how == "kill -9 of the process group" else os.kill)(process.pid, signal.SIGKILL)
        assert process.wait(timeout=30) == -signal.SIGKILL
    _wait_for_the_group_to_end(process.pid)
    print(f"stopped in generation {generation}, {delay:.2f} s after both its segments started")  # on a failure
    resumed = invoke(home, "resume", "search:latest")
    assert resumed.code == 0, resumed.stderr
    assert_same_population(home_a, home, TWO)


def test_a_lost_member_worker_fails_the_population_and_resume_continues_it(
    straight_two: tuple[Path, Path], tmp_path: Path
) -> None:
    """A worker killed outright (kill -9) mid-segment: as a parallel trial's, its segment stays
    running, the search ends failed (exit 1) naming the member, and the resumed population is the
    one never interrupted. The first worker past frame 750 of generation 0 (after its snapshot at
    500) stops itself there, so the kill lands mid-segment however loaded the machine is."""
    home_a, spec = straight_two
    home, flag = tmp_path / "runs", tmp_path / "frozen"
    process = zygote.start(
        ["search", str(spec), *PBT, "--parallel", "2"],
        env={**cli_env(home), FREEZE_ENV: f"750@{flag}"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    wait_for(lambda: flag.exists() and flag.read_text(), process, timeout=600)
    worker = int(flag.read_text())
    with Registry.open(home, create=False) as registry:  # the worker trains its one session itself
        runs = {t.number: registry.get_run(t.run_id) for t in trials(home) if t.run_id}
    member = next(number for number, run in runs.items() if run.sessions[0].pid == worker)
    os.kill(worker, signal.SIGKILL)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 1, stderr
    assert f"member {member}'s worker process exited with code -9 in generation 0" in stderr
    assert trials(home)[member].state == "running"
    resumed = invoke(home, "resume", "search:latest")
    assert resumed.code == 0, resumed.stderr
    assert_same_population(home_a, home, TWO)


def _in_flight(home: Path) -> set[int]:
    """The numbers of the segments still running whose run is recorded."""
    database = home / "registry.sqlite"
    if not database.exists():
        return set()
    try:
        with sqlite3.connect(database) as db:
            found = db.execute(
                "SELECT DISTINCT t.number FROM trials t WHERE t.state = 'running' AND t.run_id IS NOT NULL"
            ).fetchall()
    except sqlite3.OperationalError:  # the schema is still being created
        return set()
    return {number for (number,) in found}


def _wait_for_the_group_to_end(group: int, timeout: float = 120) -> None:
    """Until no process of the driver's group is left (orphaned workers stopping with a snapshot)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        assert time.monotonic() < deadline, "the driver's workers did not end"
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("edit", "args", "expected"),
    [
        ({"agent.n_epochs": {"choice": [2, 4]}}, PBT, "search.agent.n_epochs: PBT changes values mid-run"),
        ({}, ["--population", "4"], "--population set up population-based training: add --scheduler pbt"),
        ({}, [*PBT[:4], "--interval", "5k"], "--interval 5,000 must be above 0 and below the budget"),
        ({}, PBT[:4], "--scheduler pbt needs --population N and --interval FRAMES"),
        ({}, [*PBT, "--trials", "3"], "--trials belong to a search of trials"),
        ({}, [*PBT, "--parallel", "0"], "Invalid value for '--parallel': 0 is not in the range x>=1"),
        ({}, [*PBT, "--parallel", "-2"], "Invalid value for '--parallel': -2 is not in the range x>=1"),
    ],
)
def test_bad_pbt_input_is_one_line_exit_2_and_nothing_written(
    tmp_path: Path, edit: dict[str, Any], args: list[str], expected: str
) -> None:
    spec = pbt_spec(tmp_path)
    document = json.loads(spec.read_text())
    document["search"].update(edit)
    spec.write_text(json.dumps(document))
    done = rlrun(tmp_path / "runs", "search", str(spec), *args)
    assert done.code == 2 and expected in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_a_population_on_a_cluster_that_does_not_answer_is_one_line_exit_3_and_nothing_written(tmp_path: Path) -> None:
    done = rlrun(tmp_path / "runs", "search", str(pbt_spec(tmp_path)), *PBT, "--parallel", "2", "--ray", "127.0.0.1:1")
    assert done.code == 3 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: no Ray cluster at --ray 127.0.0.1:1: Connection refused; start"
        " one with `ray start --head` or give its address (--ray HOST:PORT)"
    ]
    assert not (tmp_path / "runs").exists()
