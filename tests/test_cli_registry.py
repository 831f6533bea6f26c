"""The registry commands end to end, on real trainings: ls (filters, sort, --json, --csv), show,
plot, rm, gc and db current|upgrade, every run-reference form and every error path (one line,
exit 2, nothing written), filters on enjoy, and that none of them imports torch or gymnasium."""

from __future__ import annotations

import csv
import io
import json
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import TINY, Result, cli_env, heavy_modules, invoke, popen, rlrun

from rlrun.cli.views import duration
from rlrun.registry import SCHEMA_HEAD, Registry
from rlrun.snapshot import retention

FIXTURES = Path(__file__).resolve().parent / "fixtures"
pytest_plugins = ["postgres_server"]


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Oldest first: alpha (reinforce, 1 session), beta (reinforce, 2 sessions), gamma (ppo), and a
    fork of alpha with an edited evaluation cadence."""
    home = tmp_path_factory.mktemp("zoo") / "runs"
    for args in (
        ["reinforce_cartpole", "--name", "alpha"],
        ["reinforce_cartpole", "--sessions", "2", "--name", "beta"],
        ["ppo_cartpole", "--name", "gamma"],
    ):
        done = invoke(home, "train", *args, *TINY)
        assert done.code == 0, done.stderr
    forked = invoke(home, "resume", "alpha", "--fork", "--set", "meta.eval_frequency=1500", "--frames", "4000")
    assert forked.code == 0, forked.stderr
    return home


def listed(home: Path, *args: str) -> list[dict[str, Any]]:
    done = invoke(home, "ls", "--json", *args)
    assert done.code == 0, done.stderr
    rows: list[dict[str, Any]] = done.json()
    return rows


def ids_by_name(home: Path) -> dict[str, str]:
    """Run ids by name; the fork (unnamed) under "fork"."""
    return {row["name"] or "fork": row["id"] for row in listed(home, "--all")}


def common_prefix(values: list[str]) -> str:
    first = values[0]
    return next((first[:n] for n in range(len(first), 0, -1) if all(v.startswith(first[:n]) for v in values)), "")


def ok(result: Result) -> Result:
    assert result.code == 0, result.stderr
    return result


def registry_rows(home: Path) -> dict[str, list[Any]]:
    with sqlite3.connect(home / "registry.sqlite") as db:
        tables = [name for (name,) in db.execute("select name from sqlite_master where type = 'table'")]
        return {table: db.execute(f"select * from {table} order by 1").fetchall() for table in tables}


def home_files(home: Path) -> list[tuple[str, int, int]]:
    return sorted(
        (str(p.relative_to(home)), p.stat().st_size, p.stat().st_mtime_ns)
        for p in home.rglob("*")
        if p.is_file() and not p.name.startswith("registry.sqlite")
    )


def assert_bad_input(result: Result, *fragments: str, code: int = 2) -> None:
    assert result.code == code, (result.code, result.stderr)
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


# ---- ls ----------------------------------------------------------------------------------------


@pytest.mark.slow  # trains
def test_ls_lists_newest_first_with_rows_and_aggregates(zoo: Path) -> None:
    rows = listed(zoo)
    names = [r["name"] for r in rows]
    assert names == [None, "gamma", "beta", "alpha"] and [r["row"] for r in rows] == [1, 2, 3, 4]
    beta = rows[2]
    assert (beta["num_sessions"], beta["frames_done"], beta["frames_target"], beta["status"]) == (
        2,
        6000,
        6000,
        "finished",
    )
    assert rows[0]["frames_done"] == 4000 and rows[0]["algorithm"] == "reinforce"
    human = ok(invoke(zoo, "ls"))
    assert human.stderr == ""  # the table is the answer: on stdout
    lines = human.stdout.splitlines()
    assert lines[0].split()[:3] == ["#", "id", "name"] and len(lines) == 5
    # frames: the slowest session against the per-session target, not summed over sessions
    assert "finished" in lines[1] and "gamma" in lines[2] and "3k/3k" in lines[3] and beta["session_frame"] == 3000


@pytest.mark.slow  # trains
def test_ls_duration_is_training_time_not_the_idle_gap_before_a_resume(tmp_path: Path) -> None:
    home = tmp_path / "runs"
    assert invoke(home, "train", "reinforce_cartpole", *TINY, "--sessions", "2", "--frames", "2000").code == 0
    time.sleep(4)
    assert invoke(home, "resume", "latest", "--frames", "3000").code == 0
    [run] = listed(home)
    span = run["finished_at"] - run["created_at"]
    assert 0 < run["training_seconds"] < span - 3.5  # both attempts of a session, not the gap between them
    assert (run["session_frame"], run["frames_done"]) == (3000, 6000)
    line = ok(invoke(home, "ls")).stdout.splitlines()[1]
    assert "3k/3k" in line and line.split()[-1] == duration(run["training_seconds"])


@pytest.mark.slow  # trains
@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--algo", "ppo"], ["gamma"]),
        (["--algo", "REINFORCE"], ["fork", "beta", "alpha"]),
        (["--env", "cartpole-v1", "--spec", "reinforce_cartpole"], ["fork", "beta", "alpha"]),
        (["--name", "*a"], ["gamma", "beta", "alpha"]),
        (["--name", "b*"], ["beta"]),
        (["--status", "finished", "--since", "1d"], ["fork", "gamma", "beta", "alpha"]),
        (["--status", "crashed"], []),
        (["--since", "2999-01-01"], []),
        (["-n", "2"], ["fork", "gamma"]),
    ],
)
def test_ls_filters(zoo: Path, args: list[str], names: list[str]) -> None:
    assert [r["name"] or "fork" for r in listed(zoo, *args)] == names


@pytest.mark.slow  # trains
def test_ls_sort_orders(zoo: Path) -> None:
    best = listed(zoo, "--sort", "best")
    scores = [r["best_eval"] for r in best]
    assert scores == sorted(scores, reverse=True) and [r["row"] for r in best] == [1, 2, 3, 4]
    frames = [r["frames_done"] for r in listed(zoo, "--sort", "frames")]
    assert frames == sorted(frames, reverse=True) and frames[0] == 6000


@pytest.mark.slow  # trains
def test_ls_csv_has_the_json_fields(zoo: Path) -> None:
    done = ok(invoke(zoo, "ls", "--csv"))
    table = list(csv.DictReader(io.StringIO(done.stdout)))
    document = listed(zoo)
    assert list(table[0]) == list(document[0])
    assert [(r["id"], r["status"], int(r["frames_done"])) for r in table] == [
        (r["id"], r["status"], r["frames_done"]) for r in document
    ]
    assert table[0]["created_at"].startswith(time.strftime("%Y-"))  # a readable time, not epoch seconds


@pytest.mark.slow  # trains
def test_ls_says_what_it_shows(zoo: Path) -> None:
    page = ok(invoke(zoo, "ls", "-n", "2")).stdout
    assert page.splitlines()[0] == "2 of 4 runs"
    narrowed = ok(invoke(zoo, "ls", "--algo", "reinforce", "-n", "1")).stdout
    assert narrowed.splitlines()[0] == "1 of 3 runs matching --algo reinforce"
    nothing = ok(invoke(zoo, "ls", "--algo", "dqn"))
    assert nothing.stderr == f"no runs match --algo dqn (4 runs in {zoo}); see `rlrun ls`\n"


# ---- references: every form, on show ----------------------------------------------------------


@pytest.mark.slow  # trains
def test_every_reference_form(zoo: Path) -> None:
    ids = ids_by_name(zoo)
    newest_first = [r["id"] for r in listed(zoo)]
    forms = {
        "latest": newest_first[0],
        "latest~1": newest_first[1],
        "latest~": newest_first[1],
        "latest~3": newest_first[3],
        "1": newest_first[0],
        "3": newest_first[2],
        "4": newest_first[3],
        ids["beta"]: ids["beta"],
        ids["beta"].upper(): ids["beta"],
        "alpha": ids["alpha"],
        "beta/s1": ids["beta"],
        "beta@best": ids["beta"],
        "alpha@latest/s0": ids["alpha"],
        "gamma@2k": ids["gamma"],
    }
    # The shortest prefix that names one run only.
    gamma = ids["gamma"]
    prefix = next(gamma[:n] for n in range(1, 11) if sum(i.startswith(gamma[:n]) for i in ids.values()) == 1)
    forms[prefix] = ids["gamma"]
    for reference, expected in forms.items():
        done = ok(invoke(zoo, "show", reference, "--json"))
        assert done.json()["run"]["id"] == expected, reference
        assert done.stderr.startswith(f"{reference} → run {expected}"), done.stderr


@pytest.mark.slow  # trains
def test_filters_come_before_latest_and_rows(zoo: Path) -> None:
    ids = ids_by_name(zoo)
    cases = [
        (["latest", "--algo", "ppo"], ids["gamma"]),
        (["latest", "--name", "a*"], ids["alpha"]),
        (["latest~1", "--algo", "reinforce"], ids["beta"]),
        (["2", "--algo", "reinforce"], ids["beta"]),
        (["1", "--sort", "best"], listed(zoo, "--sort", "best")[0]["id"]),
        (["latest", "--sort", "best"], listed(zoo)[0]["id"]),  # latest is the newest, whatever the order
        (["alpha", "--algo", "reinforce"], ids["alpha"]),
    ]
    for args, expected in cases:
        done = ok(invoke(zoo, "show", *args, "--json"))
        assert done.json()["run"]["id"] == expected, args
        assert done.stderr.startswith(f"{' '.join(args)} → run {expected}"), done.stderr


@pytest.mark.slow  # trains
def test_every_error_is_one_line_exit_2_and_writes_nothing(zoo: Path) -> None:
    ids = ids_by_name(zoo)
    shared = common_prefix(list(ids.values()))
    before = (registry_rows(zoo), home_files(zoo))
    cases = [
        (["show", "nosuchrun"], ["no run matches 'nosuchrun'; see `rlrun ls`"]),
        (["show", shared or "b"], ["is ambiguous: ", "type more of the id"]),
        (["show", "latest~4"], ["latest~4: only 4 runs; see `rlrun ls`"]),
        (["show", "9"], ["9: only 4 runs"]),
        (["show", "0"], ["bad run reference '0': rows start at 1"]),
        (["show", "latest~x"], ["`latest~` must be followed by a number"]),
        (["show", "alpha/s1"], ["alpha/s1: run", "has 1 session, s0; name it as alpha/s0 or leave out /s1"]),
        (["show", "alpha@worst"], ["checkpoint '@worst' is not @best"]),
        (["show", "gamma", "--algo", "reinforce"], ["no run matches 'gamma' with --algo reinforce"]),
        (["show", "latest~3", "--algo", "reinforce"], ["latest~3: only 3 runs match --algo reinforce"]),
        (["show", "latest", "--algo", "dqn"], ["no runs match --algo dqn (no run has --algo dqn; there are ppo,"]),
        (["ls", "--status", "finshed"], ["--status 'finshed' is not a run status (did you mean 'finished'?)"]),
        (["ls", "--sort", "oldest"], ["--sort 'oldest' is not a sort order"]),
        (["ls", "--since", "last week"], ["--since 'last week' is not a time"]),
        (["ls", "--json", "--csv"], ["choose --json or --csv, not both"]),
        (["ls", "-n", "0"], ["'-n' / '--limit'", "see `rlrun ls --help`"]),
        (["ls", "--colour"], ["No such option '--colour'", "see `rlrun ls --help`"]),
        (["enjoy", "latest", "--algo", "dqn"], ["no runs match --algo dqn"]),
        (["resume", "latest", "--status", "running"], ["no runs match --status running"]),
        (["rm"], ["name the runs to delete"]),
        (["rm", "nosuchrun", "--yes"], ["no run matches 'nosuchrun'"]),
        (["plot", "alpha", "-o", "plot.txt"], ["cannot write a .txt; use a .png, .svg, .pdf file"]),
        (["plot", "alpha", "-o", "nowhere/plot.png"], ["folder nowhere does not exist"]),
        (["plot", "nosuchrun", "-o", "plot.png"], ["no run matches 'nosuchrun'"]),
        (["db", "frobnicate"], ["No such command 'frobnicate'", "see `rlrun db --help`"]),
    ]
    for args, fragments in cases:
        assert_bad_input(invoke(zoo, *args), *fragments)
    assert (registry_rows(zoo), home_files(zoo)) == before
    assert not Path("plot.png").exists()


def test_a_fresh_home_stays_untouched(tmp_path: Path) -> None:
    home = tmp_path / "fresh"
    for args in (
        ["show", "latest"],
        ["rm", "latest", "--yes"],
        ["plot", "-o", str(tmp_path / "p.png")],
        ["enjoy", "latest", "--algo", "ppo"],
    ):
        assert_bad_input(invoke(home, *args), f"no runs in {home} yet")
    assert ok(invoke(home, "ls")).stderr == f"no runs in {home} yet; start one with `rlrun train reinforce_cartpole`\n"
    assert ok(invoke(home, "gc")).stderr.startswith(f"gc in {home}: nothing to remove")
    assert (
        ok(invoke(home, "db", "current")).stdout == f"{home / 'registry.sqlite'}: no registry yet (created by"
        " `rlrun train`)\n"
    )
    assert not home.exists() and not (tmp_path / "p.png").exists()


# ---- show, plot, enjoy ---------------------------------------------------------------------------


@pytest.mark.slow  # trains
def test_show_tells_the_whole_story(zoo: Path) -> None:
    ids = ids_by_name(zoo)
    beta = ok(invoke(zoo, "show", "beta")).stdout
    for part in (
        "sessions",
        "evaluation return (mean of sessions): ",
        "checkpoints",
        "evaluations",
        "spec revisions",
        "attempts",
        f"spec: revision 0 (from frame 0); print it with `rlrun show {ids['beta']} --spec-json`",
    ):
        assert part in beta, part
    assert beta.rstrip().endswith("--spec-json`") and '"max_frame"' not in beta  # the summary stays on screen
    spec = ok(invoke(zoo, "show", "beta", "--spec-json"))
    assert json.loads(spec.stdout)["meta"]["max_frame"] == 3000
    session_lines = [line for line in beta.splitlines() if line.strip().startswith(("s0 ", "s1 "))][:2]
    assert all(any(c in line for c in "▁▂▃▄▅▆▇█") for c in session_lines for line in [c])
    fork = ok(invoke(zoo, "show", ids["fork"])).stdout
    assert f"forked from {ids['alpha']} at frame 3k" in fork
    assert "meta.eval_frequency: 1000 → 1500" in fork and "meta.max_frame: 3000 → 4000" in fork
    assert f"forks: {ids['fork']}" in ok(invoke(zoo, "show", "alpha")).stdout
    document = ok(invoke(zoo, "show", ids["fork"], "--json")).json()
    assert document["run"]["parent_id"] == ids["alpha"] and len(document["spec_revisions"]) == 2


@pytest.mark.slow  # trains
def test_a_resume_that_switches_the_algorithm_is_refused_in_one_line(zoo: Path) -> None:
    refused = invoke(zoo, "resume", "alpha", "--set", "agent.algorithm=ppo")
    assert refused.code == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "its algorithm cannot change at resume" in refused.stderr and "unknown key" not in refused.stderr


@pytest.mark.slow  # trains
def test_plot_draws_runs_overlaid(zoo: Path, tmp_path: Path) -> None:
    png = tmp_path / "curves.png"
    done = ok(invoke(zoo, "plot", "alpha", "beta", "latest", "-o", str(png), "--title", "CartPole"))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert done.stderr.count(" → run ") == 3 and done.stderr.endswith(f"wrote {png}\n")
    svg = tmp_path / "ppo.svg"
    done = ok(invoke(zoo, "plot", "latest", "--algo", "ppo", "-o", str(svg)))
    assert "latest --algo ppo → run" in done.stderr and "gamma" in svg.read_text()


@pytest.mark.slow  # trains
def test_plot_curve_is_the_mean_and_std_across_sessions(zoo: Path) -> None:
    from rlrun.cli.plot import curve

    with Registry.open(zoo, create=False) as registry:
        detail = registry.get_run(registry.resolve("beta").id)
    drawn = curve(detail)
    assert drawn.frames == [1000, 2000, 3000] and drawn.sessions == 2
    for i, frame in enumerate(drawn.frames):
        means = [e.mean for e in detail.evaluations if e.frame == frame]
        assert len(means) == 2 and drawn.mean[i] == pytest.approx(sum(means) / 2)
        assert drawn.std[i] == pytest.approx(abs(means[0] - means[1]) / 2)


@pytest.mark.slow  # trains
def test_enjoy_takes_filters(zoo: Path) -> None:
    ids = ids_by_name(zoo)
    done = ok(invoke(zoo, "enjoy", "latest", "--algo", "ppo", "--episodes", "1", "--json"))
    assert done.json()["run_id"] == ids["gamma"] and f"latest --algo ppo → run {ids['gamma']}" in done.stderr
    done = ok(invoke(zoo, "enjoy", "1/s1@latest", "--name", "beta", "--episodes", "1", "--json"))
    assert (done.json()["run_id"], done.json()["session"], done.json()["checkpoint_frame"]) == (ids["beta"], 1, 3000)


# ---- rm ------------------------------------------------------------------------------------------


@pytest.fixture
def two_runs(tmp_path: Path) -> Path:
    home = tmp_path / "runs"
    ok(invoke(home, "train", "reinforce_cartpole", *TINY, "--name", "keep"))
    ok(invoke(home, "resume", "keep", "--fork", "--set", "meta.eval_frequency=500", "--frames", "3500"))
    return home


@pytest.mark.slow  # trains
def test_rm_asks_then_removes_rows_then_files(two_runs: Path) -> None:
    home = two_runs
    ids = ids_by_name(home)
    before = (registry_rows(home), home_files(home))
    declined = subprocess.run(
        [sys.executable, "-m", "rlrun", "rm", "keep"], input="n\n", env=cli_env(home), capture_output=True, text=True
    )
    assert declined.returncode == 1 and "delete 1 run and" in declined.stderr and "nothing deleted" in declined.stderr
    silent = subprocess.run(
        [sys.executable, "-m", "rlrun", "rm", "keep"],
        stdin=subprocess.DEVNULL,
        env=cli_env(home),
        capture_output=True,
        text=True,
    )
    assert silent.returncode == 1 and "pass --yes" in silent.stderr
    assert (registry_rows(home), home_files(home)) == before
    agreed = subprocess.run(
        [sys.executable, "-m", "rlrun", "rm", "keep"], input="y\n", env=cli_env(home), capture_output=True, text=True
    )
    assert agreed.returncode == 0 and "deleted 1 run and" in agreed.stderr
    assert not (home / ids["keep"]).exists()
    rows = listed(home)
    assert [r["id"] for r in rows] == [ids["fork"]]  # the fork stays, unlinked
    assert ok(invoke(home, "show", "latest", "--json")).json()["run"]["parent_id"] is None
    assert json.loads((home / ids["fork"] / "run.json").read_text())["run"]["parent_id"] is None
    ok(invoke(home, "rm", "latest", "--yes"))
    assert listed(home) == [] and [p.name for p in home.iterdir() if not p.name.startswith("registry")] == []
    with sqlite3.connect(home / "registry.sqlite") as db:
        for table in ("sessions", "checkpoints", "evaluations", "spec_revisions", "attempts"):
            assert db.execute(f"select count(*) from {table}").fetchone() == (0,), table


@pytest.mark.slow  # trains
def test_rm_refuses_a_running_run(tmp_path: Path) -> None:
    home = tmp_path / "runs"
    process = popen(home, "train", "reinforce_cartpole", "--frames", "10M", "--set", "meta.eval_frequency=10M")
    try:
        deadline = time.monotonic() + 120
        # Its metrics log exists once the session has recorded its attempt and start (which
        # rewrite run.json): from then on the training writes only what `not_training` leaves out.
        while not list(home.glob("*/s0/metrics.csv")) or listed(home, "--status", "running") == []:
            assert process.poll() is None and time.monotonic() < deadline, "the training never started"
            time.sleep(0.2)
        before = home_files(home)
        assert_bad_input(rlrun(home, "rm", "latest", "--yes"), "is still running; stop it (SIGTERM)")
        assert not_training(before) == not_training(home_files(home))

    finally:
        process.terminate()
        process.communicate(timeout=120)


def not_training(files: list[Any]) -> list[Any]:
    """The files a running training does not itself keep writing (snapshots, its metrics log and
    TensorBoard events)."""
    written = ("checkpoints", "metrics.csv", "/tb/")
    return [p for p in files if not any(part in p[0] for part in written)]


# ---- gc ------------------------------------------------------------------------------------------


@pytest.mark.slow  # trains
def test_gc_sweeps_orphans_torn_writes_and_retired_snapshots(two_runs: Path) -> None:
    home = two_runs
    ids = ids_by_name(home)
    run_dir = home / ids["keep"]
    checkpoints = run_dir / "s0" / "checkpoints"
    # A snapshot folder no row points at, a write cut short, and a registry row whose folder is gone.
    shutil.copytree(checkpoints / "f000000003000", checkpoints / "f000000009000")
    torn = checkpoints / ".f000000009500.tmp-1a2b3c4d"
    torn.mkdir()
    (torn / "state.pt").write_bytes(b"half")
    with Registry.open(home, create=False) as registry:
        lost = home / registry.get_run(ids["fork"]).checkpoints[0].path
    shutil.rmtree(lost)
    # A run folder the registry does not know (as after copying runs between homes): left alone.
    stranger = home / "zz00000000"
    shutil.copytree(run_dir, stranger)
    # A lower retention setting, as if edited since the snapshots were taken.
    with sqlite3.connect(home / "registry.sqlite") as db:
        (text,) = db.execute("select spec_json from spec_revisions where run_id = ?", (ids["keep"],)).fetchone()
        spec = json.loads(text)
        spec["meta"]["keep_checkpoints"] = 1
        db.execute("update spec_revisions set spec_json = ? where run_id = ?", (json.dumps(spec), ids["keep"]))
    with Registry.open(home, create=False) as registry:
        kept = registry.get_run(ids["keep"]).checkpoints
    retired = {c.path for c in kept} - {c.path for c in kept if c.id in retention.to_keep(kept, 1)}

    dry = ok(invoke(home, "gc", "--dry-run", "--json")).json()
    assert dry["orphans"] == [str((checkpoints / "f000000009000").relative_to(home))]
    assert dry["temporaries"] == [str(torn.relative_to(home))]
    assert set(dry["retired"]) == retired and retired
    assert dry["missing"] == [str(lost.relative_to(home))] and dry["unregistered"] == ["zz00000000"]
    assert (checkpoints / "f000000009000").exists() and torn.exists()

    done = ok(invoke(home, "gc"))
    assert done.stderr.startswith(
        f"gc in {home}: removed 1 snapshot folder no registry row points at, 1 unfinished"
        f" snapshot write, {len(retired)} snapshot"
    )
    assert "1 checkpoint row(s) point at a folder that is gone" in done.stderr, done.stderr
    assert "`rlrun db rebuild`" in done.stderr
    assert not (checkpoints / "f000000009000").exists() and not torn.exists()
    assert all(not (home / path).exists() for path in retired)
    with Registry.open(home, create=False) as registry:
        assert {c.path for c in registry.get_run(ids["keep"]).checkpoints} == {c.path for c in kept} - retired
    assert stranger.exists()
    again = ok(invoke(home, "gc", "--json")).json()
    assert (again["orphans"], again["temporaries"], again["retired"]) == ([], [], [])


# ---- db ------------------------------------------------------------------------------------------


def old_home(tmp_path: Path) -> Path:
    """A home whose registry was made at the first schema revision (the committed fixture)."""
    home = tmp_path / "old"
    home.mkdir()
    shutil.copyfile(FIXTURES / "registry-0001.sqlite", home / "registry.sqlite")
    return home


def test_db_current_and_upgrade(tmp_path: Path) -> None:
    home = old_home(tmp_path)
    current = ok(invoke(home, "db", "current"))
    assert (
        current.stdout == f"{home / 'registry.sqlite'}: schema 0001, this rlrun needs {SCHEMA_HEAD}; run"
        " `rlrun db upgrade`\n"
    )
    assert ok(invoke(home, "db", "current", "--json")).json()["up_to_date"] is False
    upgraded = ok(invoke(home, "db", "upgrade"))
    backups = list(home.glob("registry.sqlite.0001.*.bak"))
    assert len(backups) == 1 and upgraded.stdout == (
        f"upgraded {home / 'registry.sqlite'} from schema 0001 to {SCHEMA_HEAD}; the old file is kept at {backups[0]}\n"
    )
    with sqlite3.connect(backups[0]) as db:
        assert db.execute("select version_num from rlrun_alembic_version").fetchone() == ("0001",)
        assert db.execute("select count(*) from runs").fetchone() == (2,)
    assert ok(invoke(home, "db", "current")).stdout.endswith(f"schema {SCHEMA_HEAD} (head, up to date)\n")
    assert ok(invoke(home, "db", "upgrade")).stdout == f"registry already at schema {SCHEMA_HEAD}\n"


def test_any_command_upgrades_an_old_file_after_a_backup(tmp_path: Path) -> None:
    # A real process: the upgrade notice goes through logging's last-resort handler to stderr,
    # which pytest's log capture would take in-process.
    home = old_home(tmp_path)
    done = ok(rlrun(home, "ls", "--json"))
    assert [r["id"] for r in done.json()] == ["fb00000002", "fa00000001"]
    (backup,) = home.glob("registry.sqlite.0001.*.bak")
    assert f"upgraded the registry {home / 'registry.sqlite'} from schema 0001 to {SCHEMA_HEAD}" in done.stderr
    assert str(backup) in done.stderr and done.stderr.count("\n") == 1
    assert ok(rlrun(home, "ls", "--json")).stderr == ""  # once


def test_a_registry_newer_than_the_code_is_refused(tmp_path: Path) -> None:
    home = old_home(tmp_path)
    with sqlite3.connect(home / "registry.sqlite") as db:
        db.execute("update rlrun_alembic_version set version_num = '9999'")
    before = (home / "registry.sqlite").read_bytes()
    for args in (["ls"], ["show", "latest"], ["db", "upgrade"], ["gc"], ["db", "rebuild"]):
        assert_bad_input(invoke(home, *args), "is at schema revision 9999, newer than this rlrun", "upgrade rlrun")
    assert ok(invoke(home, "db", "current")).stdout.endswith(
        f"schema 9999, this rlrun needs {SCHEMA_HEAD}; run `rlrun db upgrade`\n"
    )
    assert (home / "registry.sqlite").read_bytes() == before and not list(home.glob("*.bak"))


# ---- imports -------------------------------------------------------------------------------------


def test_ls_on_a_new_or_empty_home_imports_nothing_heavy(tmp_path: Path) -> None:
    """No home yet, an empty folder, a registry without runs: `ls` answers at once there too (an
    empty registry's schema once cost SQLAlchemy's import, over a second)."""
    empty_folder, no_runs = tmp_path / "empty", tmp_path / "no-runs"
    empty_folder.mkdir()
    Registry.open(no_runs).close()
    for home in (tmp_path / "missing", empty_folder, no_runs):
        assert heavy_modules(home, "ls") == "", home
    assert not (tmp_path / "missing").exists() and not list(empty_folder.iterdir())  # ls writes nothing


@pytest.mark.slow  # trains
def test_registry_commands_never_import_torch_or_gymnasium(two_runs: Path, tmp_path: Path) -> None:
    home = two_runs
    # ls and show do not even load SQLAlchemy or Rich: they must answer at once.
    for args in (
        ["ls"],
        ["ls", "--json"],
        ["ls", "--csv", "--sort", "best"],
        ["show", "latest"],
        ["show", "1"],
        ["show", "latest", "--spec-json"],
    ):
        assert heavy_modules(home, *args) == "", args
    for args in (
        ["gc", "--dry-run"],
        ["db", "current"],
        ["db", "upgrade"],
        ["db", "rebuild"],
        ["spec", "list"],
        ["stop", "latest"],
        ["plot", "latest", "-o", str(tmp_path / "p.png")],
        ["rm", "latest", "--yes"],
    ):
        loaded = heavy_modules(home, *args)
        assert "torch" not in loaded and "gymnasium" not in loaded, (args, loaded)
    assert (tmp_path / "p.png").exists() and len(listed(home)) == 1  # they did their work


# ---- the same commands with the registry on a PostgreSQL server ---------------------------------


@pytest.mark.slow  # trains
def test_a_training_and_the_registry_commands_on_postgresql(postgres_url: str, tmp_path: Path) -> None:
    home = tmp_path / "runs"
    env = {**cli_env(home), "RLRUN_DB": postgres_url}

    def run(*args: str) -> Result:
        done = subprocess.run(
            [sys.executable, "-m", "rlrun", *args], env=env, capture_output=True, text=True, timeout=300
        )
        return Result(done.returncode, done.stdout, done.stderr)

    trained = ok(run("train", "reinforce_cartpole", *TINY, "--sessions", "2", "--name", "served", "--json")).json()
    assert not (home / "registry.sqlite").exists()  # the rows went to the server
    (row,) = ok(run("ls", "--json")).json()
    assert (row["id"], row["status"], row["frames_done"]) == (trained["run_id"], "finished", 6000)
    shown = ok(run("show", "served", "--json")).json()
    assert len(shown["evaluations"]) == 6 and {s["status"] for s in shown["sessions"]} == {"finished"}
    assert ok(run("db", "current")).stdout.endswith(f"schema {SCHEMA_HEAD} (head, up to date)\n")
    assert "rlrun:***@" in ok(run("db", "current")).stdout  # no password on screen
    assert ok(run("gc", "--json")).json()["orphans"] == []
    ok(run("rm", "served", "--yes"))
    assert ok(run("ls", "--json")).json() == [] and not (home / trained["run_id"]).exists()


def test_a_damaged_registry_or_an_unreachable_server_is_one_line(tmp_path: Path) -> None:
    home = tmp_path / "runs"
    home.mkdir()
    (home / "registry.sqlite").write_bytes(b"not a database, " * 100)
    for args in (["ls"], ["show", "latest"], ["db", "current"], ["gc"]):
        assert_bad_input(
            invoke(home, *args), "registry at", "cannot be used: file is not a database", "`rlrun db rebuild`"
        )
    env = {**cli_env(home), "RLRUN_DB": "postgresql+psycopg://someone:secret@127.0.0.1:9/nowhere"}
    done = subprocess.run([sys.executable, "-m", "rlrun", "ls"], env=env, capture_output=True, text=True, timeout=120)
    unreachable = Result(done.returncode, done.stdout, done.stderr)
    # Not bad input: the server does not answer (exit 3); the same command works once it does.
    assert_bad_input(unreachable, "someone:***@127.0.0.1:9/nowhere cannot be used", "check RLRUN_DB", code=3)
    assert "secret" not in done.stderr
