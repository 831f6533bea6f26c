"""The library calls behind the registry commands (`rlrun.catalog`, and `plan_removal` / `remove`
in `rlrun.home.maintenance`), in-process on a real SQLite registry in a temporary home: what `ls`
lists and counts, what a reference names (a run or a search), what `export` and `plot` gather, and
what `rm` may delete and how much it frees. Rows are made through the registry's own API."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from rlrun import catalog, paths
from rlrun.errors import BadInput, RunReferenceError
from rlrun.home.maintenance import plan_removal, remove
from rlrun.refs import RunFilter, RunRef, SearchRef, parse_target, search_target
from rlrun.registry import Registry
from rlrun.session import metrics_log

HERE = socket.gethostname()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def registry(home: Path) -> Iterator[Registry]:
    with Registry.open(home) as opened:
        yield opened


def make_run(
    registry: Registry,
    run_id: str,
    *,
    algorithm: str = "ppo",
    name: str | None = None,
    evaluations: Sequence[Sequence[tuple[int, float]]] = ((),),
    finished: bool = True,
) -> None:
    """A run with one session per entry of `evaluations` (each session's (frame, mean) pairs);
    finished, or still running in this (live) process."""
    registry.create_run(
        run_id=run_id,
        name=name,
        spec_name=f"{algorithm}_cartpole",
        algorithm=algorithm,
        env_id="CartPole-v1",
        max_frame=3000,
        seed=0,
        num_sessions=len(evaluations),
        spec_json="{}",
        host=HERE,
        pid=os.getpid(),
    )
    for session in registry.get_run(run_id).sessions:
        registry.start_session(session.id, host=HERE, pid=os.getpid())
        for frame, mean in evaluations[session.index]:
            registry.add_evaluation(session.id, frame=frame, mean=mean, std=0.0, min=mean, max=mean, episodes=1)
        if finished:
            registry.finish_session(session.id, status="finished", frame=3000, episode=3, opt_step=3)


def write_log(home: Path, run_id: str, index: int, rows: list[dict[str, float]]) -> None:
    names = metrics_log.columns(sorted({key for row in rows for key in row} - {"frame"}))
    log = metrics_log.path(paths.session_dir(home, run_id, index))
    log.parent.mkdir(parents=True, exist_ok=True)
    metrics_log.MetricsLog.create(log, names, rows).close()


# ---- search addressing ------------------------------------------------------------------------


def test_a_reference_is_a_search_only_in_the_search_namespace() -> None:
    assert parse_target("search:latest~2") == SearchRef(RunRef("latest", offset=2), "search:latest~2")
    assert parse_target("latest~2") == RunRef("latest", offset=2)
    assert parse_target("sweep/s1") == RunRef("token", token="sweep", session=1)
    assert search_target("sweep") == SearchRef(RunRef("token", token="sweep"), "search:sweep")
    assert search_target("search:sweep") == search_target("sweep")
    with pytest.raises(RunReferenceError, match="searches have no row numbers"):
        parse_target("search:3")


def test_lookup_reads_a_run_or_a_search(home: Path, registry: Registry) -> None:
    make_run(registry, "ra00000001", name="first", evaluations=[[(1000, 5.0), (2000, 9.0)]])
    session = registry.get_run("ra00000001").sessions[0]
    for frame in (1000, 2000, 3000):
        registry.add_checkpoint(
            session.id,
            frame=frame,
            kind="best" if frame == 2000 else "latest",
            path=f"p{frame}",
            sha256="0",
            size_bytes=1,
        )
    make_run(registry, "rb00000002", algorithm="dqn")
    registry.create_search(
        search_id="sa00000001",
        name="sweep",
        spec_name="ppo_cartpole",
        spec_json="{}",
        space_json="{}",
        settings_json=json.dumps({"metric": "eval_mean"}),
        host=HERE,
        pid=os.getpid(),
    )
    registry.add_trial("sa00000001", number=0, run_id="ra00000001", params_json="{}")

    found = catalog.lookup("latest@best", RunFilter.of(algorithm="ppo"), home=home)
    assert isinstance(found, catalog.RunLookup) and found.run.id == "ra00000001" and found.home == home
    assert found.checkpoint is not None and found.checkpoint.checkpoint.frame == 2000  # the best evaluation's
    assert found.checkpoint.score == 9.0 and len(found.detail.checkpoints) == 3
    plain = catalog.lookup("latest", home=home)
    assert isinstance(plain, catalog.RunLookup) and plain.run.id == "rb00000002" and plain.checkpoint is None

    search = catalog.lookup("search:sweep", RunFilter.of(algorithm="dqn"), home=home)  # filters are for runs
    assert isinstance(search, catalog.SearchLookup) and search.reference == "search:sweep"
    assert search.detail.search.id == "sa00000001" and [t.run_id for t in search.detail.trials] == ["ra00000001"]
    assert catalog.lookup_search("sweep", home=home) == search
    with pytest.raises(RunReferenceError, match="no search matches 'search:nope'"):
        catalog.lookup_search("nope", home=home)


# ---- ls ---------------------------------------------------------------------------------------


def test_list_runs_pages_filters_and_counts(home: Path, registry: Registry) -> None:
    make_run(registry, "ra00000001", evaluations=[[(1000, 50.0)]])
    make_run(registry, "rb00000002", algorithm="dqn", evaluations=[[(1000, 10.0)]])
    make_run(registry, "rc00000003", evaluations=[[(1000, 20.0)]])

    page = catalog.list_runs(home=home, limit=2)
    assert [r.id for r in page.runs] == ["rc00000003", "rb00000002"] and page.total == 3  # beyond the page
    every = catalog.list_runs(home=home, limit=None)
    assert [r.row for r in every.runs] == [1, 2, 3] and every.total == every.everything == 3
    best = catalog.list_runs(RunFilter.of(algorithm="ppo", sort="best"), home=home)
    assert [r.id for r in best.runs] == ["ra00000001", "rc00000003"] and best.total == 2
    none = catalog.list_runs(RunFilter.of(algorithm="a2c"), home=home)
    assert (none.runs, none.total, none.everything, none.home) == ([], 0, 3, home)  # a wrong filter, not an empty home


def test_list_searches_newest_first(home: Path, registry: Registry) -> None:
    assert catalog.list_searches(home=home) == []
    for search_id in ("sa00000001", "sb00000002"):
        registry.create_search(
            search_id=search_id,
            name=None,
            spec_name="ppo_cartpole",
            spec_json="{}",
            space_json="{}",
            settings_json="{}",
            host=HERE,
            pid=os.getpid(),
        )
    assert [s.id for s, _, _ in catalog.list_searches(home=home)] == ["sb00000002", "sa00000001"]
    assert len(catalog.list_searches(home=home, limit=1)) == 1


# ---- export and plot --------------------------------------------------------------------------


def test_export_gathers_each_run_once_and_names_every_reference(home: Path, registry: Registry) -> None:
    make_run(registry, "ra00000001", name="kl", evaluations=[(), ()])
    make_run(registry, "rb00000002")
    write_log(home, "ra00000001", 0, [{"frame": 500, "approx_kl": 0.1}, {"frame": 1000, "approx_kl": 0.2}])
    write_log(home, "ra00000001", 1, [{"frame": 500, "approx_kl": 0.3}])
    write_log(home, "rb00000002", 0, [{"frame": 500, "q_mean": 1.5}])

    exported = catalog.export_metrics(["kl", "latest", "ra00000001"], home=home)
    assert [(reference, run.id) for reference, run in exported.named] == [
        ("kl", "ra00000001"),
        ("latest", "rb00000002"),
        ("ra00000001", "ra00000001"),
    ]
    table = exported.table
    assert table["run"] == ["ra00000001"] * 3 + ["rb00000002"] and table["session"] == [0, 0, 1, 0]
    assert table["approx_kl"] == [0.1, 0.2, 0.3, None] and table["q_mean"] == [None, None, None, 1.5]
    with pytest.raises(RunReferenceError, match="takes whole runs"):
        catalog.export_metrics(["kl/s0"], home=home)


def test_plot_data_averages_sessions_and_refuses_what_it_cannot_draw(home: Path, registry: Registry) -> None:
    make_run(registry, "ra00000001", evaluations=[[(1000, 10.0), (2000, 30.0)], [(1000, 20.0)]])
    write_log(home, "ra00000001", 0, [{"frame": 500, "entropy": 0.6}])
    write_log(home, "ra00000001", 1, [{"frame": 500, "entropy": 0.4}])

    drawn = catalog.plot_data(["latest", "ra00000001"], home=home)
    assert isinstance(drawn, catalog.RunCurves) and len(drawn.named) == 2 and len(drawn.curves) == 1
    (curve,) = drawn.curves
    assert (curve.frames, curve.mean, curve.std, curve.sessions) == ([1000, 2000], [15.0, 30.0], [5.0, 0.0], 2)
    kl = catalog.plot_data(["latest"], home=home, metric="entropy")
    assert isinstance(kl, catalog.RunCurves) and kl.curves[0].mean == [pytest.approx(0.5)]
    with pytest.raises(BadInput, match="did you mean 'entropy'"):
        catalog.plot_data(["latest"], home=home, metric="entropi")
    with pytest.raises(BadInput, match="one search at a time"):
        catalog.plot_data(["search:latest", "latest"], home=home)


# ---- rm ---------------------------------------------------------------------------------------


def test_plan_removal_sizes_what_goes_and_remove_deletes_it(home: Path, registry: Registry) -> None:
    make_run(registry, "ra00000001")
    make_run(registry, "rb00000002")
    gone, kept = paths.run_dir(home, "ra00000001"), paths.run_dir(home, "rb00000002")
    (gone / "weights.bin").write_bytes(b"x" * 5000)
    (gone / "shared.bin").write_bytes(b"y" * 7000)
    os.link(gone / "shared.bin", kept / "shared.bin")  # a segment a kept run still needs frees nothing
    own = sum(f.stat().st_size for f in gone.rglob("*") if f.is_file() and f.name != "shared.bin")

    plan = plan_removal(["ra00000001", "latest~1"], home=home)
    assert [(reference, run.id) for reference, run in plan.named] == [("ra00000001", "ra00000001")]
    assert plan.bytes_freed == own and plan.refused == [] and own >= 5000
    plan.check()
    assert remove(plan) >= 5000
    assert not gone.exists() and kept.is_dir() and (kept / "shared.bin").stat().st_size == 7000
    assert registry.run_ids() == {"rb00000002"}
    with pytest.raises(RunReferenceError, match="takes whole runs"):
        plan_removal(["rb00000002@1k"], home=home)


def test_a_running_run_refuses_the_plan_even_when_it_started_after_it(home: Path, registry: Registry) -> None:
    make_run(registry, "ra00000001")
    make_run(registry, "rb00000002", finished=False)  # its sessions run in this (live) process
    plan = plan_removal(["ra00000001", "rb00000002"], home=home)
    assert [run.id for run in plan.refused] == ["rb00000002"]
    with pytest.raises(BadInput, match="run rb00000002 is still running"):
        plan.check()
    # A plan made before the run (re)started: remove reads the statuses again and deletes nothing.
    stale = plan._replace(refused=[])
    with pytest.raises(BadInput, match="run rb00000002 is still running"):
        remove(stale)
    assert registry.run_ids() == {"ra00000001", "rb00000002"} and paths.run_dir(home, "ra00000001").is_dir()


# ---- the public API ---------------------------------------------------------------------------


def test_the_package_exports_them_without_torch_or_sqlalchemy() -> None:
    names = (
        "RunFilter",
        "list_runs",
        "list_searches",
        "lookup",
        "lookup_search",
        "export_metrics",
        "plot_data",
        "plan_removal",
        "remove",
    )
    code = (
        f"import sys, rlrun; found = [getattr(rlrun, n) for n in {names!r}]; "
        "print([m for m in ('torch', 'gymnasium', 'sqlalchemy', 'matplotlib') if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
    import rlrun

    assert rlrun.lookup is catalog.lookup and rlrun.remove is remove and set(names) <= set(rlrun.__all__)


def test_the_catalog_lists_each_name_where_it_loads_it() -> None:
    assert sorted(catalog.__all__) == sorted(catalog._LAZY)
    for name in catalog.__all__:
        assert getattr(catalog, name).__module__ == f"rlrun.catalog.{catalog._LAZY[name]}", name
