"""The run registry against real SQLite files: writes, reads, run references, concurrency."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlrun.errors import BadInput, RegistryError, RunReferenceError
from rlrun.ids import ALPHABET, ID_LENGTH, new_run_id
from rlrun.paths import REGISTRY_FILE
from rlrun.refs import RunFilter, parse_ref
from rlrun.registry import Registry, RestoredRun, RunRecord, SessionRecord, liveness, queries, stale_after_seconds
from rlrun.registry.database import LeaseLost

pytest_plugins = ["postgres_server"]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture(params=["sqlite", "postgresql"])
def registry(request: pytest.FixtureRequest, home: Path) -> Iterator[Registry]:
    """The registry of a fresh home: its SQLite file, or an empty PostgreSQL database."""
    url = None if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    with Registry.open(home, url) as opened:
        yield opened


def sqlite_only(registry: Registry) -> None:
    if registry._db.integrity_errors[0].__module__ != "sqlite3":  # type: ignore[attr-defined]
        pytest.skip("looks at SQLite's own statements")


def make_run(
    registry: Registry, run_id: str | None, *, name: str | None = None, sessions: int = 2, **extra: Any
) -> RunRecord:
    fields: dict[str, Any] = {
        "spec_name": "reinforce_cartpole",
        "algorithm": "reinforce",
        "env_id": "CartPole-v1",
        "max_frame": 1000,
        "seed": 7,
        "num_sessions": sessions,
        "spec_json": json.dumps({"name": "reinforce_cartpole"}),
        "host": "box",
        "pid": 42,
    }
    fields.update(extra)
    return registry.create_run(run_id=run_id, name=name, **fields)


def session_of(registry: Registry, run_id: str, index: int = 0) -> SessionRecord:
    return registry.get_session(run_id, index)


def scalar(registry: Registry, sql: str) -> Any:
    """One value read straight from the database."""
    with registry._transaction(write=False) as tx:
        return tx.rows(sql)[0][0]


def reference_error(registry: Registry, ref: str) -> str:
    with pytest.raises(RunReferenceError) as caught:
        registry.resolve(ref)
    message = str(caught.value)
    assert "\n" not in message
    return message


# ---- ids -------------------------------------------------------------------------------------


def test_run_ids_are_short_lowercase_and_start_with_a_letter() -> None:
    ids = {new_run_id() for _ in range(200)}
    assert len(ids) > 150  # the random part varies within one second
    for run_id in ids:
        assert len(run_id) == ID_LENGTH == 10
        assert run_id[0].isalpha() and run_id[0].islower()
        assert set(run_id) <= set(ALPHABET)


def test_a_run_id_drawn_twice_is_drawn_again(registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs created in the same second can draw the same id (3 random characters): the registry
    draws again, for a new run and for an imported one, instead of refusing the insert."""
    from rlrun.registry import store

    make_run(registry, "bk3x9q2m7a")
    draws = iter(["bk3x9q2m7a", "bk3x9q2m7b", "bk3x9q2m7a", "bk3x9q2m7c"])
    monkeypatch.setattr(store, "new_run_id", lambda created_at=None: next(draws))
    created = make_run(registry, None)  # the registry draws its id
    assert created.id == "bk3x9q2m7b"
    foreign = RestoredRun(registry.resolve("bk3x9q2m7a")._replace(name="imported"), [], [], [], [], [])
    copied = registry.restore_run(foreign, fresh_id=True)
    assert copied == "bk3x9q2m7c" and registry.resolve(copied).name == "imported"
    assert {r.id for r in registry.list_runs(limit=None)} == {"bk3x9q2m7a", "bk3x9q2m7b", "bk3x9q2m7c"}


def test_run_ids_sort_by_creation_second() -> None:
    times = [0, 1, 59, 1_700_000_000, 1_700_000_001, 1_800_000_000, 4_000_000_000]
    ids = [new_run_id(t) for t in times]
    assert ids == sorted(ids)
    assert all(run_id[0].isalpha() for run_id in ids)


# ---- writes ----------------------------------------------------------------------------------


def test_create_run_inserts_sessions_and_spec_revision(registry: Registry) -> None:
    run = make_run(registry, "ka00000001", name="first", sessions=3, seed=10)
    assert (run.status, run.num_sessions, run.seed, run.name) == ("running", 3, 10, "first")
    detail = registry.get_run(run.id)
    assert detail.run == run
    assert [(s.index, s.seed, s.status, s.frame) for s in detail.sessions] == [
        (0, 10, "pending", 0),
        (1, 11, "pending", 0),
        (2, 12, "pending", 0),
    ]
    [revision] = detail.spec_revisions
    assert (revision.revision, revision.frame, revision.diff_json) == (0, 0, None)
    assert json.loads(revision.spec_json) == {"name": "reinforce_cartpole"}
    assert detail.checkpoints == [] and detail.evaluations == []


def test_name_collision_is_bad_input_and_writes_nothing(registry: Registry) -> None:
    make_run(registry, "ka00000001", name="baseline")
    with pytest.raises(BadInput) as caught:
        make_run(registry, "ka00000002", name="baseline")
    message = str(caught.value)
    assert "a run named 'baseline' already exists (id ka00000001)" in message
    assert "--name" in message
    assert registry.count_runs() == 1
    assert registry.name_exists("baseline") == "ka00000001"
    assert registry.name_exists("other") is None


def test_duplicate_id_and_unknown_parent_are_refused(registry: Registry) -> None:
    make_run(registry, "ka00000001")
    with pytest.raises(RegistryError, match="already exists"):
        make_run(registry, "ka00000001")
    with pytest.raises(RegistryError, match="parent run zz00000000"):
        make_run(registry, "ka00000002", parent_id="zz00000000")
    assert registry.count_runs() == 1


def test_session_lifecycle(registry: Registry) -> None:
    run = make_run(registry, "ka00000001")
    session = session_of(registry, run.id)
    registry.start_session(session.id, host="node-3", pid=99)
    started = session_of(registry, run.id)
    assert (started.status, started.host, started.pid) == ("running", "node-3", 99)
    assert started.started_at is not None and started.heartbeat_at is not None
    registry.heartbeat(session.id, frame=500, episode=12, opt_step=40)
    beat = session_of(registry, run.id)
    assert (beat.frame, beat.episode, beat.opt_step) == (500, 12, 40)
    assert beat.heartbeat_at is not None and beat.heartbeat_at >= started.heartbeat_at
    registry.finish_session(session.id, status="failed", frame=600, episode=13, opt_step=50, error="boom")
    done = session_of(registry, run.id)
    assert (done.status, done.frame, done.error) == ("failed", 600, "boom")
    assert done.finished_at is not None
    registry.start_session(session.id, host="node-4", pid=100)  # a resume
    resumed = session_of(registry, run.id)
    assert (resumed.status, resumed.error, resumed.finished_at) == ("running", None, None)
    assert resumed.started_at == started.started_at  # the first start is kept
    assert session_of(registry, run.id, 1).status == "pending"  # untouched


def test_run_finish_and_reopen(registry: Registry) -> None:
    run = make_run(registry, "ka00000001")
    registry.finish_run(run.id, status="preempted", error="SIGTERM")
    ended = registry.resolve(run.id)
    assert (ended.status, ended.error) == ("preempted", "SIGTERM")
    assert ended.finished_at is not None
    registry.reopen_run(run.id, host="other", pid=5, max_frame=5000)
    reopened = registry.resolve(run.id)
    assert (reopened.status, reopened.error, reopened.finished_at) == ("running", None, None)
    assert (reopened.max_frame, reopened.host, reopened.pid) == (5000, "other", 5)
    with pytest.raises(ValueError, match="status 'done'"):
        registry.finish_run(run.id, status="done")
    with pytest.raises(RegistryError, match="no run with id nope"):
        registry.finish_run("nope", status="finished")


def test_updates_to_missing_rows_raise(registry: Registry) -> None:
    with pytest.raises(RegistryError, match="no session with id 123"):
        registry.heartbeat(123, frame=1, episode=1, opt_step=1)
    with pytest.raises(RegistryError, match="no session with id 123"):
        registry.add_checkpoint(123, frame=1, kind="final", path="p", sha256="0", size_bytes=1)
    with pytest.raises(RegistryError, match="no checkpoint with id 5"):
        registry.remove_checkpoint(5)


def test_checkpoints(registry: Registry) -> None:
    run = make_run(registry, "ka00000001")
    s0, s1 = session_of(registry, run.id, 0), session_of(registry, run.id, 1)

    def add(session: SessionRecord, frame: int, kind: str) -> int:
        path = f"{run.id}/s{session.index}/checkpoints/{frame}.pt"
        record = registry.add_checkpoint(
            session.id, frame=frame, kind=kind, path=path, sha256="ab" * 32, size_bytes=frame * 10
        )
        assert (record.session_index, record.run_id, record.path) == (session.index, run.id, path)
        return record.id

    add(s1, 100, "periodic")
    late = add(s0, 300, "final")
    add(s0, 100, "periodic+best")
    listed = registry.get_run(run.id).checkpoints
    assert [(c.session_index, c.frame, c.kind) for c in listed] == [
        (0, 100, "periodic+best"),
        (0, 300, "final"),
        (1, 100, "periodic"),
    ]
    assert [c.frame for c in registry.checkpoints(s0.id)] == [100, 300]
    registry.remove_checkpoint(late)
    assert [c.frame for c in registry.checkpoints(s0.id)] == [100]
    assert [c.frame for c in registry.checkpoints(s1.id)] == [100]


def test_evaluations_track_last_and_best(registry: Registry) -> None:
    run = make_run(registry, "ka00000001")
    s0 = session_of(registry, run.id)
    assert (s0.best_eval, s0.last_eval) == (None, None)
    for frame, mean in [(100, 5.0), (200, 9.0), (300, -2.0)]:
        record = registry.add_evaluation(s0.id, frame=frame, mean=mean, std=1.0, min=mean - 1, max=mean + 1, episodes=4)
        assert (record.kind, record.session_index, record.mean) == ("train", 0, mean)
    tracked = session_of(registry, run.id)
    assert (tracked.best_eval, tracked.last_eval) == (9.0, -2.0)
    # Scores from `rlrun enjoy` are kept but do not move the training best.
    registry.add_evaluation(s0.id, frame=300, mean=100.0, std=0.0, min=100.0, max=100.0, episodes=1, kind="enjoy")
    assert session_of(registry, run.id).best_eval == 9.0
    evaluations = registry.get_run(run.id).evaluations
    assert [(e.frame, e.kind) for e in evaluations] == [
        (100, "train"),
        (200, "train"),
        (300, "train"),
        (300, "enjoy"),
    ]
    with pytest.raises(ValueError, match="finite"):
        registry.add_evaluation(s0.id, frame=400, mean=float("nan"), std=0.0, min=0.0, max=0.0, episodes=1)


def test_spec_revisions(registry: Registry) -> None:
    run = make_run(registry, "ka00000001")
    added = registry.add_spec_revision(run.id, frame=800, spec_json='{"v": 2}', diff_json="[1]")
    assert (added.revision, added.frame) == (1, 800)
    revisions = registry.get_run(run.id).spec_revisions
    assert [(r.revision, r.frame) for r in revisions] == [(0, 0), (1, 800)]
    assert revisions[1].to_json()["spec"] == {"v": 2}
    assert revisions[1].to_json()["diff"] == [1]
    with pytest.raises(RegistryError, match="no run with id nope"):
        registry.add_spec_revision("nope", frame=1, spec_json="{}", diff_json=None)


def test_delete_run_cascades_and_unlinks_forks(registry: Registry, home: Path) -> None:
    parent = make_run(registry, "ka00000001")
    child = make_run(registry, "ka00000002", parent_id=parent.id)
    keep = session_of(registry, child.id)
    for run in (parent, child):
        s0 = session_of(registry, run.id)
        registry.add_checkpoint(s0.id, frame=1, kind="final", path="p", sha256="0", size_bytes=1)
        registry.add_evaluation(s0.id, frame=1, mean=1.0, std=0.0, min=1.0, max=1.0, episodes=1)
    assert registry.resolve(child.id).parent_id == parent.id
    registry.delete_run(parent.id)
    assert registry.resolve(child.id).parent_id is None
    assert registry.count_runs() == 1
    for table, expected in [
        ("sessions", 2),
        ("checkpoints", 1),
        ("evaluations", 1),
        ("spec_revisions", 1),
    ]:
        assert scalar(registry, f"SELECT count(*) FROM {table}") == expected
    assert registry.checkpoints(keep.id) != []
    with pytest.raises(RegistryError):
        registry.delete_run(parent.id)


# ---- listing ---------------------------------------------------------------------------------


def _fill(registry: Registry) -> list[RunRecord]:
    """Five runs, oldest first: statuses, progress and scores that the aggregates must add up."""
    runs = [make_run(registry, f"ka0000000{i}", name=f"r{i}", sessions=2) for i in range(5)]
    for i, run in enumerate(runs):
        s0, s1 = session_of(registry, run.id, 0), session_of(registry, run.id, 1)
        registry.heartbeat(s0.id, frame=100 * i, episode=i, opt_step=i)
        registry.heartbeat(s1.id, frame=10 * i, episode=i, opt_step=i)
        if i % 2 == 0:
            registry.add_evaluation(s1.id, frame=1, mean=float(i), std=0, min=0, max=0, episodes=1)
            registry.add_evaluation(s0.id, frame=1, mean=-1.0, std=0, min=0, max=0, episodes=1)
        if i in (1, 3):
            registry.finish_run(run.id, status="finished")
    return runs


def test_list_runs_newest_first_with_aggregates(registry: Registry) -> None:
    runs = _fill(registry)
    listed = registry.list_runs()
    assert [s.id for s in listed] == [r.id for r in reversed(runs)]
    assert [s.row for s in listed] == [1, 2, 3, 4, 5]
    by_id = {s.id: s for s in listed}
    for i, run in enumerate(runs):
        summary = by_id[run.id]
        assert summary.frames_done == 110 * i
        assert summary.frames_target == 2000
        assert summary.best_eval == (float(i) if i % 2 == 0 else None)
        assert summary.status == ("finished" if i in (1, 3) else "running")
        assert (summary.name, summary.num_sessions, summary.algorithm) == (f"r{i}", 2, "reinforce")
    assert by_id[runs[0].id].best_eval == 0.0  # max of 0.0 and -1.0, not "falsy so None"


def test_list_runs_limit_and_status_filter(registry: Registry) -> None:
    runs = _fill(registry)
    assert [s.id for s in registry.list_runs(limit=2)] == [runs[4].id, runs[3].id]
    assert len(registry.list_runs(limit=None)) == 5
    finished = registry.list_runs(status="finished")
    assert [(s.row, s.id) for s in finished] == [(1, runs[3].id), (2, runs[1].id)]
    assert [s.id for s in registry.list_runs(status="running", limit=1)] == [runs[4].id]
    assert registry.list_runs(status="failed") == []
    assert registry.count_runs() == 5
    assert registry.count_runs("finished") == 2
    assert registry.count_runs("failed") == 0


def test_records_serialise_to_json(registry: Registry) -> None:
    runs = _fill(registry)
    s0 = session_of(registry, runs[0].id)
    registry.add_checkpoint(s0.id, frame=1, kind="best", path="p", sha256="0", size_bytes=1)
    detail = registry.get_run(runs[0].id).to_json()
    round_trip = json.loads(json.dumps(detail))
    assert round_trip == detail
    assert detail["run"]["id"] == runs[0].id
    assert detail["sessions"][0]["index"] == 0
    assert detail["checkpoints"][0]["session_index"] == 0
    assert detail["spec_revisions"][0]["spec"] == {"name": "reinforce_cartpole"}
    summary = registry.list_runs(limit=1)[0].to_json()
    assert json.loads(json.dumps(summary)) == summary and summary["row"] == 1


# ---- opening ---------------------------------------------------------------------------------


def test_open_without_create_on_a_missing_file_writes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "fresh"
    with Registry.open(home, create=False) as registry:
        assert registry.list_runs() == []
        assert registry.count_runs() == 0
        assert registry.name_exists("x") is None
        message = reference_error(registry, "latest")
        assert f"no runs in {home} yet" in message
        assert "rlrun train reinforce_cartpole" in message
        with pytest.raises(RegistryError, match="no registry at"):
            make_run(registry, "ka00000001")
    assert not home.exists()
    assert list(tmp_path.iterdir()) == []


def test_open_without_create_reads_an_existing_registry(home: Path) -> None:
    with Registry.open(home) as registry:
        make_run(registry, "ka00000001")
    with Registry.open(home, create=False) as registry:
        assert registry.count_runs() == 1
    assert (home / REGISTRY_FILE).is_file()


def test_explicit_url_overrides_the_home(tmp_path: Path) -> None:
    db = tmp_path / "elsewhere" / "other.sqlite"
    with Registry.open(tmp_path / "home", f"sqlite:///{db}") as registry:
        make_run(registry, "ka00000001")
    assert db.is_file()
    assert not (tmp_path / "home" / REGISTRY_FILE).exists()


def test_registry_import_and_open_stay_light(home: Path) -> None:
    Registry.open(home).close()  # the schema exists: opening again must not need Alembic
    code = (
        "import sys; from pathlib import Path; from rlrun.registry import Registry; "
        f"r = Registry.open(Path({str(home)!r})); r.list_runs(); r.close(); "
        "heavy = ['torch', 'gymnasium', 'numpy', 'pydantic', 'rich', 'alembic', 'sqlalchemy']; "
        "print([m for m in heavy if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert out.stdout.strip() == "[]"


# ---- run references --------------------------------------------------------------------------


@pytest.fixture
def three(registry: Registry) -> list[RunRecord]:
    """Oldest first: two ids sharing the prefix `ka`, one `kb`."""
    return [
        make_run(registry, "ka00000001", name="alpha"),
        make_run(registry, "ka00000002"),
        make_run(registry, "kb00000003", name="gamma", sessions=1),
    ]


def test_resolve_latest_and_rows(registry: Registry, three: list[RunRecord]) -> None:
    newest_first = [r.id for r in reversed(three)]
    assert registry.resolve("latest").id == newest_first[0]
    assert registry.resolve("latest~1").id == newest_first[1]
    assert registry.resolve("latest~2").id == newest_first[2]
    assert [registry.resolve(str(row)).id for row in (1, 2, 3)] == newest_first
    assert registry.resolve(parse_ref("latest~1")).id == newest_first[1]


def test_resolve_ids_names_and_prefixes(registry: Registry, three: list[RunRecord]) -> None:
    assert registry.resolve("ka00000002").id == "ka00000002"
    assert registry.resolve("KA00000002").id == "ka00000002"
    assert registry.resolve("alpha").id == "ka00000001"
    assert registry.resolve("kb").id == "kb00000003"
    assert registry.resolve("gamma@best").id == "kb00000003"
    assert registry.resolve("ka00000001/s1@5M").id == "ka00000001"


def test_resolve_order_is_id_then_name_then_prefix(registry: Registry) -> None:
    make_run(registry, "ka00000001")
    make_run(registry, "ka00000002", name="ka00000001")  # a name equal to another run's id
    make_run(registry, "kb00000003", name="ka")  # a name that is also an ambiguous prefix
    assert registry.resolve("ka00000001").id == "ka00000001"
    assert registry.resolve("ka").id == "kb00000003"


def test_resolve_unknown(registry: Registry, three: list[RunRecord]) -> None:
    assert reference_error(registry, "zz") == "no run matches 'zz'; see `rlrun ls`"
    # names need no prefix; a near miss is suggested (issue 27.12)
    assert reference_error(registry, "alph") == "no run matches 'alph' (did you mean 'alpha'?); see `rlrun ls`"


def test_a_search_name_given_as_a_run_points_at_search_colon(registry: Registry, three: list[RunRecord]) -> None:
    registry.create_search(
        search_id="sa00000001",
        name="sweep",
        spec_name="reinforce_cartpole",
        spec_json="{}",
        space_json="{}",
        settings_json="{}",
        host=None,
        pid=None,
    )
    assert reference_error(registry, "sweep") == "'sweep' is a search, not a run: use `search:sweep`"


def test_resolve_ambiguous_prefix_lists_candidates(registry: Registry, three: list[RunRecord]) -> None:
    message = reference_error(registry, "ka")
    assert message.startswith("'ka' is ambiguous: ")
    assert message.endswith("; type more of the id")
    when = time.strftime("%Y-%m-%d", time.localtime(three[0].created_at))
    assert f"ka00000001 (alpha, {when}" in message
    assert f"ka00000002 ({when}" in message
    assert "kb00000003" not in message
    assert message.index("ka00000002") < message.index("ka00000001")  # newest first


def test_ambiguous_prefix_shows_at_most_ten(registry: Registry) -> None:
    for i in range(12):
        make_run(registry, f"kc{i:08d}")
    message = reference_error(registry, "kc")
    assert message.count("kc0000") == 10
    assert "and more" in message


def test_resolve_out_of_range(registry: Registry, three: list[RunRecord]) -> None:
    assert reference_error(registry, "latest~5") == "latest~5: only 3 runs; see `rlrun ls`"
    assert reference_error(registry, "latest~3").startswith("latest~3: only 3 runs")
    assert reference_error(registry, "9") == "9: only 3 runs; see `rlrun ls`"
    assert registry.resolve("latest~2").id == three[0].id  # the edge itself is in range


def test_resolve_with_no_runs(registry: Registry, home: Path) -> None:
    for ref in ("latest", "1", "ka", "alpha"):
        assert reference_error(registry, ref) == (
            f"no runs in {home} yet; start one with `rlrun train reinforce_cartpole`"
        )


def test_resolve_session_suffix_in_range(registry: Registry, three: list[RunRecord]) -> None:
    assert registry.resolve("alpha/s1").id == "ka00000001"
    message = reference_error(registry, "alpha/s2")
    assert message == "alpha/s2: run ka00000001 has 2 sessions, s0 to s1; name one of them as alpha/s0 or leave out /s2"
    assert reference_error(registry, "gamma/s1@best") == (
        "gamma/s1@best: run kb00000003 has 1 session, s0; name it as gamma/s0@best or leave out /s1"
    )


def test_resolve_bad_syntax(registry: Registry, three: list[RunRecord]) -> None:
    assert "bad run reference" in reference_error(registry, "alpha@nowhere")


def test_get_run_and_session_unknown(registry: Registry, three: list[RunRecord]) -> None:
    with pytest.raises(RunReferenceError, match="no run with id 'zz'"):
        registry.get_run("zz")
    with pytest.raises(RunReferenceError, match="run kb00000003 has no session s1"):
        registry.get_session("kb00000003", 1)


# ---- concurrency -----------------------------------------------------------------------------

WRITERS = 6
ROUNDS = 34  # each round: a heartbeat, an evaluation and a checkpoint (~100 transactions)


def _report(errors: Any, role: str) -> None:
    errors.put(f"{role}: {traceback.format_exc()}")


def _writer(home: str, worker: int, barrier: Any, errors: Any) -> None:
    try:
        barrier.wait()
        with Registry.open(Path(home)) as registry:
            run_id = f"w{worker}{'0' * 8}"
            make_run(registry, run_id, name=f"worker-{worker}")
            session = registry.get_session(run_id, 1)
            registry.start_session(session.id, host="h", pid=worker)
            for step in range(1, ROUNDS + 1):
                registry.heartbeat(session.id, frame=step * 10, episode=step, opt_step=step)
                registry.add_evaluation(
                    session.id,
                    frame=step * 10,
                    mean=float(step % 7),
                    std=0.0,
                    min=0.0,
                    max=0.0,
                    episodes=1,
                )
                registry.add_checkpoint(
                    session.id,
                    frame=step * 10,
                    kind="periodic",
                    path=f"{run_id}/{step}",
                    sha256="0" * 64,
                    size_bytes=step,
                )
    except BaseException:
        _report(errors, f"writer {worker}")
        raise


def _reader(home: str, barrier: Any, stop: Any, errors: Any) -> None:
    try:
        barrier.wait()
        with Registry.open(Path(home)) as registry:
            while not stop.is_set():
                for summary in registry.list_runs(limit=None):
                    detail = registry.get_run(summary.id)
                    # A run is created in one transaction: never seen without its sessions.
                    assert len(detail.sessions) == detail.run.num_sessions == 2
                    assert len(detail.spec_revisions) == 1
    except BaseException:
        _report(errors, "reader")
        raise


def test_parallel_writers_and_a_reader_on_a_new_file(tmp_path: Path) -> None:
    home = tmp_path / "shared-home"  # does not exist: all processes race to create it
    ctx = multiprocessing.get_context("spawn")
    barrier, stop, errors = ctx.Barrier(WRITERS + 1), ctx.Event(), ctx.Queue()
    writers = [ctx.Process(target=_writer, args=(str(home), i, barrier, errors)) for i in range(WRITERS)]
    reader = ctx.Process(target=_reader, args=(str(home), barrier, stop, errors))
    for process in [*writers, reader]:
        process.start()
    for process in writers:
        process.join(timeout=120)
    stop.set()
    reader.join(timeout=60)
    problems = []
    while not errors.empty():
        problems.append(errors.get())
    assert problems == []
    assert [p.exitcode for p in [*writers, reader]] == [0] * (WRITERS + 1)

    with Registry.open(home, create=False) as registry:
        summaries = registry.list_runs(limit=None)
        assert len(summaries) == WRITERS
        for summary in summaries:
            detail = registry.get_run(summary.id)
            busy = detail.sessions[1]
            assert (busy.frame, busy.episode, busy.status) == (ROUNDS * 10, ROUNDS, "running")
            assert busy.best_eval == 6.0
            assert len(detail.evaluations) == ROUNDS
            assert len(detail.checkpoints) == ROUNDS
            assert summary.frames_done == ROUNDS * 10


# ---- attempts, forks, spec revisions ---------------------------------------------------------


def test_attempts_round_trip(registry: Registry) -> None:
    run = make_run(registry, "ka00000001")
    s0, s1 = session_of(registry, run.id, 0), session_of(registry, run.id, 1)
    first = registry.add_attempt(s0.id, kind="train", host="node-1", pid=11, start_frame=0)
    assert (first.run_id, first.session_id, first.session_index) == (run.id, s0.id, 0)
    assert (first.kind, first.host, first.pid, first.start_frame) == ("train", "node-1", 11, 0)
    assert (first.ended_at, first.end_status, first.approximate, first.note) == (
        None,
        None,
        False,
        None,
    )
    registry.end_attempt(first.id, status="preempted")
    second = registry.add_attempt(
        s1.id,
        kind="resume",
        host="node-2",
        pid=22,
        start_frame=500,
        approximate=True,
        note="replay memory was not saved",
    )
    attempts = registry.get_run(run.id).attempts
    assert [a.id for a in attempts] == [first.id, second.id]
    ended = attempts[0]
    assert ended.end_status == "preempted"
    assert ended.ended_at is not None and ended.ended_at >= ended.started_at
    assert attempts[1] == second
    assert (second.session_index, second.approximate, second.note) == (
        1,
        True,
        "replay memory was not saved",
    )
    detail = registry.get_run(run.id).to_json()
    assert json.loads(json.dumps(detail))["attempts"][1]["approximate"] is True
    with pytest.raises(ValueError, match="attempt kind 'rerun'"):
        registry.add_attempt(s0.id, kind="rerun", host=None, pid=None, start_frame=0)
    with pytest.raises(ValueError, match="status 'done'"):
        registry.end_attempt(first.id, status="done")
    with pytest.raises(RegistryError, match="no attempt with id 999"):
        registry.end_attempt(999, status="finished")
    with pytest.raises(RegistryError, match="no session with id 999"):
        registry.add_attempt(999, kind="train", host=None, pid=None, start_frame=0)
    assert len(registry.get_run(run.id).attempts) == 2  # the refused ones wrote nothing
    registry.delete_run(run.id)
    assert scalar(registry, "SELECT count(*) FROM attempts") == 0


def test_forks_are_listed_on_the_parent(registry: Registry) -> None:
    parent = make_run(registry, "ka00000001")
    make_run(registry, "ka00000002")
    first = make_run(registry, "ka00000003", parent_id=parent.id)
    second = make_run(registry, "ka00000004", parent_id=parent.id)
    grandchild = make_run(registry, "ka00000005", parent_id=first.id)
    assert registry.get_run(parent.id).forks == [first.id, second.id]
    assert registry.get_run(first.id).forks == [grandchild.id]
    assert registry.get_run(second.id).forks == []
    assert registry.get_run(parent.id).to_json()["forks"] == [first.id, second.id]


def test_latest_spec(registry: Registry) -> None:
    run = make_run(registry, "ka00000001")
    assert registry.latest_spec(run.id).revision == 0
    registry.add_spec_revision(run.id, frame=500, spec_json='{"v": 1}', diff_json="[]")
    registry.add_spec_revision(run.id, frame=900, spec_json='{"v": 2}', diff_json="[]")
    latest = registry.latest_spec(run.id)
    assert (latest.revision, latest.frame, latest.spec_json) == (2, 900, '{"v": 2}')
    with pytest.raises(RunReferenceError, match="no run with id 'nope'"):
        registry.latest_spec("nope")


# ---- rewind ----------------------------------------------------------------------------------


def test_rewind_forgets_exactly_what_came_after_the_frame(registry: Registry) -> None:
    run = make_run(registry, "ka00000001")
    s0, s1 = session_of(registry, run.id, 0), session_of(registry, run.id, 1)
    checkpoints = {}
    for session in (s0, s1):
        for frame in (100, 200, 300, 400):
            checkpoints[session.index, frame] = registry.add_checkpoint(
                session.id,
                frame=frame,
                kind="periodic",
                path=f"s{session.index}/{frame}",
                sha256="0" * 64,
                size_bytes=frame,
            )
        for frame, mean in [(100, 12.0), (200, 9.0), (300, 50.0), (400, -2.0)]:
            registry.add_evaluation(session.id, frame=frame, mean=mean, std=0.0, min=mean, max=mean, episodes=1)
    registry.add_evaluation(s0.id, frame=400, mean=500.0, std=0.0, min=0.0, max=0.0, episodes=1, kind="enjoy")
    registry.finish_session(s0.id, status="failed", frame=450, episode=30, opt_step=31, error="boom")
    assert (session_of(registry, run.id).best_eval, session_of(registry, run.id).last_eval) == (
        50.0,
        -2.0,
    )

    dropped = registry.rewind_session(s0.id, frame=200, episode=7, opt_step=8)

    assert dropped == [checkpoints[0, 300], checkpoints[0, 400]]
    rewound = session_of(registry, run.id, 0)
    assert (rewound.frame, rewound.episode, rewound.opt_step) == (200, 7, 8)
    assert (rewound.best_eval, rewound.last_eval) == (12.0, 9.0)
    assert (rewound.error, rewound.finished_at, rewound.status) == (None, None, "failed")
    detail = registry.get_run(run.id)
    assert [(c.session_index, c.frame) for c in detail.checkpoints] == [
        (0, 100),
        (0, 200),
        (1, 100),
        (1, 200),
        (1, 300),
        (1, 400),
    ]
    assert [(e.session_index, e.frame, e.kind) for e in detail.evaluations] == [
        (0, 100, "train"),
        (0, 200, "train"),
        (0, 400, "enjoy"),
        (1, 100, "train"),
        (1, 200, "train"),
        (1, 300, "train"),
        (1, 400, "train"),
    ]
    untouched = session_of(registry, run.id, 1)
    assert (untouched.best_eval, untouched.last_eval) == (50.0, -2.0)

    assert registry.rewind_session(s0.id, frame=200, episode=7, opt_step=8) == []  # idempotent
    gone = registry.rewind_session(s0.id, frame=0, episode=0, opt_step=0)
    assert [c.frame for c in gone] == [100, 200]
    fresh = session_of(registry, run.id, 0)
    assert (fresh.frame, fresh.best_eval, fresh.last_eval) == (0, None, None)
    with pytest.raises(RegistryError, match="no session with id 999"):
        registry.rewind_session(999, frame=0, episode=0, opt_step=0)


def test_reopen_keeps_the_budget_unless_given(registry: Registry) -> None:
    run = make_run(registry, "ka00000001", max_frame=1000)
    registry.finish_run(run.id, status="failed", error="boom")
    registry.reopen_run(run.id, host="node-9", pid=77)
    reopened = registry.get_run(run.id).run
    assert (reopened.status, reopened.error, reopened.finished_at) == ("running", None, None)
    assert (reopened.host, reopened.pid, reopened.max_frame) == ("node-9", 77, 1000)


def test_a_stop_request_reaches_the_heartbeat_stands_when_repeated_and_ends_with_a_reopen(registry: Registry) -> None:
    """`rlrun stop`'s row: each session's heartbeat answers it; a second request keeps the first
    one's time; a resume (reopen) clears it, and the detached supervisor with it."""
    run = make_run(registry, "ka00000001")
    other = make_run(registry, "kb00000001")
    session, bystander = session_of(registry, run.id), session_of(registry, other.id)
    registry.start_session(session.id, host=HERE, pid=os.getpid())
    assert registry.heartbeat(session.id, frame=10, episode=1, opt_step=1) is False
    assert not registry.stop_requested(run.id)
    registry.supervise_run(run.id, supervisor="actor rlrun/rlrun-ka00000001-abcdef on node 1234", host="n", pid=9)
    assert registry.request_stop(run.id) is None
    asked = registry.get_run(run.id).run.stop_requested_at
    assert asked is not None and registry.stop_requested(run.id)
    assert registry.request_stop(run.id) == asked == registry.get_run(run.id).run.stop_requested_at
    assert registry.heartbeat(session.id, frame=20, episode=2, opt_step=2) is True
    assert registry.heartbeat(bystander.id, frame=20, episode=2, opt_step=2) is False, "only that run's sessions"
    record = registry.get_run(run.id).run
    assert (record.supervisor, record.host, record.pid) == ("actor rlrun/rlrun-ka00000001-abcdef on node 1234", "n", 9)
    registry.reopen_run(run.id, host="box", pid=43)
    reopened = registry.get_run(run.id).run
    assert (reopened.stop_requested_at, reopened.supervisor) == (None, None) and not registry.stop_requested(run.id)


def test_a_restarted_supervisor_takes_back_only_a_run_still_its_own(registry: Registry) -> None:
    """A detached supervisor that Ray starts again takes the run back (on its new node) while the
    record still names its actor; after a resume took the run over (which forgets the supervisor),
    another actor's takeover, or the run's end, it is refused and the record stays as it was."""
    label = "actor rlrun/rlrun-ka00000001-abcdef on node "
    run = make_run(registry, "ka00000001")
    assert registry.supervise_run(run.id, supervisor=label + "1111", host="a", pid=1)
    assert registry.supervisor_of(run.id) == label + "1111"
    assert registry.supervise_run(run.id, supervisor=label + "2222", host="b", pid=2, again_as=label)
    assert registry.supervise_run(run.id, supervisor=label + "2222", host="b", pid=2, again_as=label), "repeatable"
    record = registry.get_run(run.id).run
    assert (record.supervisor, record.host, record.pid) == (label + "2222", "b", 2)

    registry.reopen_run(run.id, host="laptop", pid=43)  # `rlrun resume` in the foreground
    assert not registry.supervise_run(run.id, supervisor=label + "3333", host="c", pid=3, again_as=label)
    record = registry.get_run(run.id).run
    assert (record.supervisor, record.host, record.pid) == (None, "laptop", 43)
    assert registry.supervisor_of(run.id) is None

    other = "actor rlrun/rlrun-ka00000001-fedcba on node "  # `rlrun resume --detach`: a new actor
    assert registry.supervise_run(run.id, supervisor=other + "4444", host="d", pid=4)
    assert not registry.supervise_run(run.id, supervisor=label + "3333", host="c", pid=3, again_as=label)
    assert registry.supervise_run(run.id, supervisor=other + "5555", host="e", pid=5, again_as=other)
    registry.finish_run(run.id, status="finished")
    assert not registry.supervise_run(run.id, supervisor=other + "6666", host="f", pid=6, again_as=other)
    record = registry.get_run(run.id).run
    assert (record.status, record.supervisor, record.pid) == ("finished", other + "5555", 5)


def test_a_retry_runs_again_the_run_its_lost_attempt_closed(registry: Registry) -> None:
    """A worker stopped by SIGTERM (as Ray stops a dead supervisor's tasks) records its session
    preempted, which settles a one-session run; the retry that continues it, under the next lease,
    makes the run running again, with the same launcher and supervisor, and the stale attempt can no
    longer close it."""
    run = make_run(registry, "ka00000001", sessions=1)
    session = session_of(registry, run.id)
    registry.supervise_run(run.id, supervisor="actor rlrun/x on node 1", host="n", pid=9)
    lost = registry.acquire_lease(session.id)
    registry.start_session(session.id, host=HERE, pid=os.getpid())
    registry.finish_session(session.id, status="preempted", frame=500, episode=5, opt_step=5)
    assert registry.get_run(run.id).run.status == "preempted"
    with Registry.open(registry.home, registry.url) as retry:
        retry.fence(session.id, retry.acquire_lease(session.id))
        retry.run_again(run.id)
        retry.run_again(run.id)  # safe to repeat
        assert scalar(registry, "SELECT status FROM runs") == "running"
        retry.start_session(session.id, host=HERE, pid=os.getpid())  # as the retry's Session does next
    again = registry.get_run(run.id).run
    assert (again.status, again.finished_at, again.supervisor, again.host, again.pid) == (
        "running",
        None,
        "actor rlrun/x on node 1",
        "n",
        9,
    )
    with Registry.open(registry.home, registry.url) as stale:
        stale.fence(session.id, lost)
        with pytest.raises(LeaseLost):
            stale.finish_session(session.id, status="preempted", frame=600, episode=6, opt_step=6)


# ---- liveness: "crashed" is computed on read -------------------------------------------------

HERE = socket.gethostname()


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def set_columns(registry: Registry, table: str, row_id: int | str, **values: Any) -> None:
    """Write columns behind the registry's back (to age a heartbeat, say)."""
    assignments = ", ".join(f"{column} = :{column}" for column in values)
    with registry._transaction(write=True) as tx:
        tx.execute(f"UPDATE {table} SET {assignments} WHERE id = :id", {**values, "id": row_id})


def statuses(registry: Registry, run_id: str) -> tuple[str, list[str]]:
    detail = registry.get_run(run_id)
    return detail.run.status, [s.status for s in detail.sessions]


def test_a_killed_session_process_is_crashed_at_once(registry: Registry) -> None:
    run = make_run(registry, "ka00000001", sessions=1, host=HERE, pid=os.getpid())
    session = session_of(registry, run.id)
    child = sleeper()
    try:
        registry.start_session(session.id, host=HERE, pid=child.pid)
        assert session_of(registry, run.id).status == "running"
        live = registry.live_session(run.id)
        assert live is not None and (live.id, live.host, live.pid) == (session.id, HERE, child.pid)
        assert [s.id for s in registry.list_runs(status="running")] == [run.id]
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()

    crashed = session_of(registry, run.id)
    assert crashed.status == "crashed"
    assert crashed.heartbeat_at is not None and time.time() - crashed.heartbeat_at < 10
    assert statuses(registry, run.id) == ("crashed", ["crashed"])
    assert registry.resolve(run.id).status == "crashed"
    assert registry.resolve("latest").status == "crashed"
    assert registry.live_session(run.id) is None
    assert [(s.row, s.id, s.status) for s in registry.list_runs(status="crashed")] == [
        (1, run.id, "crashed"),
    ]
    assert registry.list_runs(status="running") == []
    assert [s.status for s in registry.list_runs()] == ["crashed"]
    assert (registry.count_runs("crashed"), registry.count_runs("running")) == (1, 0)
    assert registry.count_runs() == 1
    stored = scalar(registry, "SELECT status FROM sessions")  # computed, never written
    assert stored == "running"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="zombies are seen through /proc")
def test_an_unreaped_killed_child_is_crashed(registry: Registry) -> None:
    run = make_run(registry, "ka00000001", sessions=1, host=HERE, pid=os.getpid())
    session = session_of(registry, run.id)
    child = sleeper()
    try:
        registry.start_session(session.id, host=HERE, pid=child.pid)
        child.send_signal(signal.SIGKILL)
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # dead, not reaped: a zombie
        assert session_of(registry, run.id).status == "crashed"
    finally:
        child.kill()
        child.wait()


def test_a_stale_heartbeat_is_crashed_even_with_a_live_pid(registry: Registry) -> None:
    run = make_run(registry, "ka00000001", sessions=1, host=HERE, pid=os.getpid())
    session = session_of(registry, run.id)
    registry.start_session(session.id, host=HERE, pid=os.getpid())
    set_columns(registry, "sessions", session.id, heartbeat_at=time.time() - stale_after_seconds() - 5)
    assert statuses(registry, run.id) == ("crashed", ["crashed"])
    assert registry.live_session(run.id) is None
    assert [s.id for s in registry.list_runs(status="crashed")] == [run.id]
    set_columns(registry, "sessions", session.id, heartbeat_at=time.time() - stale_after_seconds() + 5)
    assert statuses(registry, run.id) == ("running", ["running"])
    registry.heartbeat(session.id, frame=10, episode=1, opt_step=1)
    assert registry.count_runs("running") == 1


def test_a_fresh_heartbeat_and_a_live_pid_is_running(registry: Registry) -> None:
    run = make_run(registry, "ka00000001", sessions=2, host=HERE, pid=os.getpid())
    s0, s1 = session_of(registry, run.id, 0), session_of(registry, run.id, 1)
    registry.start_session(s1.id, host=HERE, pid=os.getpid())
    assert statuses(registry, run.id) == ("running", ["pending", "running"])
    live = registry.live_session(run.id)
    assert live is not None and (live.index, live.host, live.pid) == (1, HERE, os.getpid())
    assert registry.resolve(run.id).status == "running"
    assert [s.id for s in registry.list_runs(status="running")] == [run.id]
    assert registry.list_runs(status="crashed") == []
    registry.finish_session(s1.id, status="finished", frame=1, episode=1, opt_step=1)
    assert registry.live_session(run.id) is None  # nothing running, s0 only pending
    assert s0.status == "pending"
    with pytest.raises(RunReferenceError, match="no run with id 'nope'"):
        registry.live_session("nope")


def test_pids_on_other_hosts_are_not_checked(registry: Registry) -> None:
    run = make_run(registry, "ka00000001", sessions=1, host="elsewhere", pid=dead_pid())
    session = session_of(registry, run.id)
    registry.start_session(session.id, host="elsewhere", pid=dead_pid())
    assert statuses(registry, run.id) == ("running", ["running"])
    assert registry.live_session(run.id) is not None
    set_columns(registry, "sessions", session.id, heartbeat_at=time.time() - 3600)
    assert statuses(registry, run.id) == ("crashed", ["crashed"])


def test_pending_sessions_crash_with_their_launcher(registry: Registry) -> None:
    gone = make_run(registry, "ka00000001", host=HERE, pid=dead_pid())
    assert statuses(registry, gone.id) == ("crashed", ["crashed", "crashed"])
    waiting = make_run(registry, "ka00000002", host="elsewhere", pid=1)
    assert statuses(registry, waiting.id) == ("running", ["pending", "pending"])
    set_columns(registry, "runs", waiting.id, created_at=time.time() - stale_after_seconds() - 1)
    assert statuses(registry, waiting.id) == ("crashed", ["crashed", "crashed"])
    # A heartbeat on a pending session is a sign of life in its own right.
    registry.heartbeat(session_of(registry, waiting.id, 1).id, frame=0, episode=0, opt_step=0)
    assert statuses(registry, waiting.id) == ("running", ["crashed", "pending"])
    assert registry.live_session(waiting.id) is None  # pending is not running


def test_a_run_is_crashed_when_no_session_is_alive(registry: Registry) -> None:
    run = make_run(registry, "ka00000001", sessions=3, host=HERE, pid=os.getpid())
    s0, s1, s2 = (session_of(registry, run.id, i) for i in range(3))
    registry.finish_session(s0.id, status="finished", frame=1000, episode=9, opt_step=9)
    registry.start_session(s1.id, host=HERE, pid=os.getpid())
    registry.finish_session(s2.id, status="failed", frame=3, episode=0, opt_step=0, error="x")
    assert statuses(registry, run.id) == ("running", ["finished", "running", "failed"])
    set_columns(registry, "sessions", s1.id, heartbeat_at=time.time() - 3600)
    assert statuses(registry, run.id) == ("crashed", ["finished", "crashed", "failed"])
    # Every session ended and the launcher never recorded the end: the run takes its sessions'
    # verdict (one failed), never crashed (issue 16; tests/unit/test_registry_rules.py).
    registry.finish_session(s1.id, status="finished", frame=1000, episode=9, opt_step=9)
    assert statuses(registry, run.id) == ("failed", ["finished", "finished", "failed"])
    # A stored end wins at run level; a session left "running" still reads as crashed.
    registry.start_session(s1.id, host=HERE, pid=dead_pid())
    registry.finish_run(run.id, status="preempted")
    assert statuses(registry, run.id) == ("preempted", ["finished", "crashed", "failed"])
    assert registry.resolve(run.id).status == "preempted"
    assert [s.id for s in registry.list_runs(status="preempted")] == [run.id]
    assert registry.list_runs(status="crashed") == []


def _mixed(registry: Registry) -> dict[str, str]:
    """Six runs, oldest first, and the status each must be reported with."""
    expected = {}
    for i, kind in enumerate(["alive", "killed", "finished", "stale", "alive", "launcher-gone"]):
        launcher = dead_pid() if kind == "launcher-gone" else os.getpid()
        run = make_run(registry, f"ka0000000{i}", sessions=1, host=HERE, pid=launcher)
        session = session_of(registry, run.id)
        if kind in ("alive", "killed", "stale", "finished"):
            pid = dead_pid() if kind == "killed" else os.getpid()
            registry.start_session(session.id, host=HERE, pid=pid)
        if kind == "stale":
            set_columns(registry, "sessions", session.id, heartbeat_at=time.time() - 3600)
        if kind == "finished":
            registry.finish_session(session.id, status="finished", frame=1, episode=1, opt_step=1)
            registry.finish_run(run.id, status="finished")
        expected[run.id] = {"alive": "running", "finished": "finished"}.get(kind, "crashed")
    return expected


def test_ls_filters_on_the_reported_status(registry: Registry) -> None:
    expected = _mixed(registry)
    newest_first = list(reversed(expected))
    listed = registry.list_runs(limit=None)
    assert [(s.id, s.status) for s in listed] == [(i, expected[i]) for i in newest_first]
    for status in ("running", "crashed", "finished", "failed"):
        ids = [i for i in newest_first if expected[i] == status]
        chosen = registry.list_runs(status=status, limit=None)
        assert [(s.row, s.id, s.status) for s in chosen] == [(n + 1, i, status) for n, i in enumerate(ids)]
        assert [s.id for s in registry.list_runs(status=status, limit=2)] == ids[:2]
        assert registry.count_runs(status) == len(ids)
    assert registry.count_runs("crashed") == 3 and registry.count_runs("running") == 2
    assert [s.status for s in registry.list_runs(limit=3)] == [expected[i] for i in newest_first[:3]]


def test_ls_status_without_an_in_list(registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _mixed(registry)
    monkeypatch.setattr(queries.records, "IN_LIMIT", 1)  # as with thousands of running runs
    assert {s.id: s.status for s in registry.list_runs(limit=None)} == expected


def _selects(registry: Registry, call: Any) -> int:
    """How many SELECT statements `call` sends to SQLite."""
    seen: list[str] = []

    def record(statement: str) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            seen.append(statement)

    connection = registry._db.connection()  # type: ignore[attr-defined]
    connection.set_trace_callback(record)
    try:
        call()
    finally:
        connection.set_trace_callback(None)
    return len(seen)


def test_ls_is_one_query_unless_the_page_holds_running_runs(registry: Registry) -> None:
    sqlite_only(registry)
    for i in range(3):
        run = make_run(registry, f"ka0000000{i}")
        registry.finish_run(run.id, status="finished")
    assert _selects(registry, lambda: registry.list_runs()) == 1
    make_run(registry, "ka00000009")
    assert _selects(registry, lambda: registry.list_runs()) == 2
    assert _selects(registry, lambda: registry.list_runs(status="finished")) == 1
    assert _selects(registry, lambda: registry.list_runs(status="crashed")) == 2


def test_pid_checks() -> None:
    assert liveness.pid_alive(os.getpid())
    assert not liveness.pid_alive(dead_pid())
    assert not liveness.pid_alive(2**40)
    assert liveness.pid_alive(0)  # not a pid: never reported dead


# ---- filters and sort orders: listing, counting and references agree -------------------------


def _zoo(registry: Registry) -> dict[str, RunRecord]:
    """Six runs, oldest first, differing in algorithm, env, spec, name, age, frames and score."""
    now = time.time()
    specs = [
        ("za00000001", "sweep-a", "ppo", "CartPole-v1", "ppo_cartpole", 30 * 86400, 3000, 10.0),
        ("za00000002", "sweep-b", "ppo", "CartPole-v1", "ppo_cartpole", 5 * 86400, 9000, 200.0),
        ("za00000003", "baseline", "reinforce", "CartPole-v1", "reinforce_cartpole", 3 * 86400, 1000, None),
        ("za00000004", None, "dqn", "Acrobot-v1", "dqn_acrobot", 2 * 86400, 5000, -80.0),
        ("za00000005", "sweep_c", "ppo", "Acrobot-v1", "ppo_acrobot", 3600, 7000, -60.0),
        ("za00000006", "Sweep-D", "sac", "Pendulum-v1", "sac_pendulum", 60, 0, None),
    ]
    runs = {}
    for run_id, name, algorithm, env, spec, age, frames, best in specs:
        run = make_run(registry, run_id, name=name, algorithm=algorithm, env_id=env, spec_name=spec, sessions=1)
        set_columns(registry, "runs", run_id, created_at=now - age)
        session = session_of(registry, run_id)
        registry.finish_session(session.id, status="finished", frame=frames, episode=1, opt_step=1)
        registry.finish_run(run_id, status="finished")
        if best is not None:
            registry.add_evaluation(session.id, frame=frames, mean=best, std=0, min=best, max=best, episodes=1)
        runs[run_id] = run
    return runs


def _ids(registry: Registry, filters: RunFilter, limit: int | None = None) -> list[str]:
    listed = registry.list_runs(filters=filters, limit=limit)
    assert [s.row for s in listed] == list(range(1, len(listed) + 1))
    return [s.id.removeprefix("za0000000") for s in listed]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, ["6", "5", "4", "3", "2", "1"]),
        ({"algorithm": "ppo"}, ["5", "2", "1"]),
        ({"algorithm": "PPO"}, ["5", "2", "1"]),  # case does not matter
        ({"env": "cartpole-v1"}, ["3", "2", "1"]),
        ({"spec": "ppo_cartpole"}, ["2", "1"]),
        ({"name": "sweep-*"}, ["6", "2", "1"]),  # the glob ignores case: Sweep-D
        ({"name": "sweep?c"}, ["5"]),
        ({"name": "sweep_*"}, ["5"]),  # `_` is a character, not a wildcard
        ({"name": "*"}, ["6", "5", "3", "2", "1"]),  # unnamed runs have no name to match
        ({"since": "4d"}, ["6", "5", "4", "3"]),
        ({"algorithm": "ppo", "since": "10d"}, ["5", "2"]),
        ({"status": "finished", "env": "Acrobot-v1"}, ["5", "4"]),
        ({"status": "failed"}, []),
        ({"sort": "best"}, ["2", "1", "5", "4", "6", "3"]),  # unevaluated last, newest first among them
        ({"sort": "frames"}, ["2", "5", "4", "1", "3", "6"]),
        ({"sort": "best", "algorithm": "ppo"}, ["2", "1", "5"]),
    ],
)
def test_filters_and_sort(registry: Registry, options: dict[str, str], expected: list[str]) -> None:
    _zoo(registry)
    filters = RunFilter.of(**options)
    assert _ids(registry, filters) == expected
    assert registry.count_runs(filters) == len(expected)
    assert _ids(registry, filters, limit=2) == expected[:2]
    # Row numbers and latest count the same runs: row N is the Nth listed, latest the newest.
    for row, run_id in enumerate(expected, start=1):
        assert registry.resolve(str(row), filters).id == f"za0000000{run_id}"
    if expected:
        newest = max(expected)  # ids here grow with age order
        assert registry.resolve("latest", filters).id == f"za0000000{newest}"


def test_references_with_filters(registry: Registry) -> None:
    _zoo(registry)
    ppo = RunFilter.of(algorithm="ppo")
    assert registry.resolve("latest~1", ppo).id == "za00000002"
    assert registry.resolve("sweep-a", ppo).id == "za00000001"  # a name that passes
    assert registry.resolve("za", RunFilter.of(algorithm="sac")).id == "za00000006"  # the prefix is unique there
    assert "'za' is ambiguous" in reference_error_with(registry, "za", ppo)
    assert reference_error_with(registry, "baseline", ppo) == (
        "no run matches 'baseline' with --algo ppo; see `rlrun ls --algo ppo`"
    )
    assert reference_error_with(registry, "latest~3", ppo) == (
        "latest~3: only 3 runs match --algo ppo; see `rlrun ls --algo ppo`"
    )
    assert reference_error_with(registry, "4", RunFilter.of(spec="ppo_cartpole", sort="best")) == (
        "4: only 2 runs match --spec ppo_cartpole --sort best; see `rlrun ls --spec ppo_cartpole --sort best`"
    )
    assert reference_error_with(registry, "latest", RunFilter.of(algorithm="ppx")) == (
        "no runs match --algo ppx (no run has --algo ppx; there are dqn, ppo, reinforce, sac); see `rlrun ls`"
    )
    assert reference_error_with(registry, "1", RunFilter.of(status="failed")) == (
        "no runs match --status failed; see `rlrun ls`"
    )


def reference_error_with(registry: Registry, ref: str, filters: RunFilter) -> str:
    with pytest.raises(RunReferenceError) as caught:
        registry.resolve(ref, filters)
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_running_and_crashed_filters_with_other_filters(registry: Registry) -> None:
    expected = _mixed(registry)  # every run: reinforce on CartPole
    set_columns(registry, "runs", "ka00000004", algorithm="ppo")  # "alive"
    set_columns(registry, "runs", "ka00000003", algorithm="ppo")  # "stale": crashed
    ppo_running = RunFilter.of(status="running", algorithm="ppo")
    assert [s.id for s in registry.list_runs(filters=ppo_running)] == ["ka00000004"]
    assert registry.resolve("latest", RunFilter.of(status="crashed", algorithm="ppo")).id == "ka00000003"
    assert registry.count_runs(RunFilter.of(status="crashed", algorithm="reinforce")) == 2
    assert registry.resolve("ka00000000", RunFilter.of(status="running")).status == "running"
    assert expected["ka00000000"] == "running"


# ---- manifests: every change to a run's rows is mirrored in its folder -----------------------


def manifest(registry: Registry, run_id: str) -> dict[str, Any]:
    return json.loads((registry.home / run_id / "run.json").read_text())


def test_the_manifest_follows_the_rows(registry: Registry) -> None:
    parent = make_run(registry, "ka00000001", name="parent")
    first = manifest(registry, parent.id)
    assert first["format"] == 2 and first["run"]["status"] == "running" and first["run"]["name"] == "parent"
    assert [s["status"] for s in first["sessions"]] == ["pending", "pending"]
    assert first["spec_revisions"][0]["spec"] == {"name": "reinforce_cartpole"}
    s0 = session_of(registry, parent.id)
    registry.start_session(s0.id, host="node", pid=7)
    attempt = registry.add_attempt(s0.id, kind="train", host="node", pid=7, start_frame=0)
    registry.heartbeat(s0.id, frame=50, episode=1, opt_step=1)
    assert manifest(registry, parent.id)["sessions"][0]["frame"] == 0  # heartbeats are not mirrored
    registry.add_evaluation(s0.id, frame=100, mean=5.0, std=0, min=5, max=5, episodes=1)
    registry.add_evaluation(s0.id, frame=100, mean=50.0, std=0, min=50, max=50, episodes=1, kind="enjoy")
    registry.finish_session(s0.id, status="finished", frame=100, episode=3, opt_step=4)
    registry.end_attempt(attempt.id, status="finished")
    registry.add_spec_revision(parent.id, frame=100, spec_json='{"v": 1}', diff_json='[{"path": "a"}]')
    registry.finish_run(parent.id, status="preempted")
    written = manifest(registry, parent.id)
    detail = registry.get_run(parent.id)
    # every column but the home: run.json names none (a copied folder would carry a stale one)
    assert detail.run.home is not None
    assert written["run"] == {k: v for k, v in detail.run.to_json().items() if k != "home"}
    session_row = {k: v for k, v in detail.sessions[0].to_json().items() if k not in ("id", "run_id")}
    assert written["sessions"][0] == session_row
    assert [r["revision"] for r in written["spec_revisions"]] == [0, 1]
    assert written["spec_revisions"][1]["diff"] == [{"path": "a"}]
    assert [(a["session_index"], a["kind"], a["end_status"]) for a in written["attempts"]] == [(0, "train", "finished")]
    assert [(e["kind"], e["mean"]) for e in written["evaluations"]] == [("enjoy", 50.0)]  # train ones: snapshots
    child = make_run(registry, "ka00000002", parent_id=parent.id)
    assert manifest(registry, child.id)["run"]["parent_id"] == parent.id
    registry.delete_run(parent.id)
    assert manifest(registry, child.id)["run"]["parent_id"] is None  # unlinked, and the folder says so


def test_restore_run_puts_back_every_row(registry: Registry) -> None:
    parent = make_run(registry, "ka00000001")
    run = make_run(registry, "ka00000002", name="restored", parent_id=parent.id, sessions=2)
    s1 = session_of(registry, run.id, 1)
    registry.start_session(s1.id, host="h", pid=1)
    registry.add_attempt(s1.id, kind="fork", host="h", pid=1, start_frame=10, approximate=True, note="why")
    registry.add_checkpoint(s1.id, frame=10, kind="periodic", path="p/10", sha256="ab" * 32, size_bytes=3)
    registry.add_evaluation(s1.id, frame=10, mean=1.5, std=0.5, min=1.0, max=2.0, episodes=2)
    registry.finish_session(s1.id, status="finished", frame=10, episode=2, opt_step=3)
    registry.finish_run(run.id, status="finished")
    before = registry.get_run(run.id)
    listed_before = registry.list_runs()
    restored = RestoredRun(
        run=before.run._replace(parent_id="ka00000099"),  # a parent that is gone is dropped
        sessions=[
            {"session_index": s.index, **{k: v for k, v in s.to_json().items() if k not in ("id", "run_id", "index")}}
            for s in before.sessions
        ],
        spec_revisions=[
            {k: v for k, v in r._asdict().items() if k not in ("id", "run_id")} for r in before.spec_revisions
        ],
        attempts=[
            {k: v for k, v in a.to_json().items() if k not in ("id", "run_id", "session_id")} for a in before.attempts
        ],
        checkpoints=[
            {k: v for k, v in c.to_json().items() if k not in ("id", "run_id", "session_id")}
            for c in before.checkpoints
        ],
        evaluations=[
            {k: v for k, v in e.to_json().items() if k not in ("id", "run_id", "session_id")}
            for e in before.evaluations
        ],
    )
    registry.delete_run(run.id)
    registry.restore_run(restored)
    after = registry.get_run(run.id)
    assert after.run == before.run._replace(parent_id=None)

    def without_ids(records: list[Any]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.to_json().items() if k not in ("id", "session_id")} for r in records]

    for field_name in ("sessions", "checkpoints", "evaluations", "spec_revisions", "attempts"):
        assert without_ids(getattr(after, field_name)) == without_ids(getattr(before, field_name)), field_name
    assert [s.to_json() for s in registry.list_runs()] == [s.to_json() for s in listed_before]
    assert manifest(registry, run.id)["run"]["parent_id"] is None
