"""`rlrun db rebuild`: delete the registry, rebuild it from the run folders, and `rlrun ls --json`
is what it was; `rlrun show --json` too, apart from row ids and the creation times the folders do
not keep. The runs cover one and several sessions, two algorithms, a resume with a spec edit, a
fork, a run stopped by SIGTERM and an `rlrun enjoy` score."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import TINY, Result, invoke, rlrun

from rlrun.testhooks import SIGNAL_AT_ENV

pytestmark = pytest.mark.slow  # real trainings in subprocesses

ROW_IDS = ("id", "session_id")


def ok(result: Result, code: int = 0) -> Result:
    assert result.code == code, result.stderr
    return result


def comparable(document: dict[str, Any]) -> dict[str, Any]:
    """A `show --json` document without what a rebuild cannot restore: row ids, and when
    checkpoints and evaluations were recorded (the folders keep file times instead)."""
    out: dict[str, Any] = {"run": document["run"], "forks": document["forks"]}
    for key in ("sessions", "spec_revisions", "attempts", "checkpoints", "evaluations"):
        dropped = ROW_IDS + (("created_at",) if key in ("checkpoints", "evaluations") else ())
        out[key] = [{k: v for k, v in row.items() if k not in dropped} for row in document[key]]
    return out


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("rebuild") / "runs"
    ok(invoke(home, "train", "reinforce_cartpole", *TINY, "--name", "alpha"))
    ok(invoke(home, "train", "reinforce_cartpole", *TINY, "--sessions", "2", "--name", "beta"))
    ok(invoke(home, "train", "ppo_cartpole", *TINY, "--name", "gamma"))
    ok(invoke(home, "resume", "alpha", "--frames", "4000", "--set", "meta.eval_frequency=500"))
    ok(invoke(home, "resume", "beta", "--fork", "--frames", "4000"))
    ok(invoke(home, "enjoy", "alpha", "--episodes", "2"))
    return home


def test_rebuild_restores_what_ls_and_show_say(history: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = history
    monkeypatch.setenv(SIGNAL_AT_ENV, "1500")  # this run stops itself with SIGTERM at frame 1,500
    ok(invoke(home, "train", "reinforce_cartpole", *TINY, "--name", "delta"), code=143)
    monkeypatch.delenv(SIGNAL_AT_ENV)
    before = ok(rlrun(home, "ls", "--json", "--all")).json()
    assert [r["status"] for r in before] == ["preempted", "finished", "finished", "finished", "finished"]
    shown = {r["id"]: comparable(ok(rlrun(home, "show", r["id"], "--json")).json()) for r in before}
    assert any(e["kind"] == "enjoy" for doc in shown.values() for e in doc["evaluations"])

    for path in home.glob("registry.sqlite*"):
        path.unlink()
    assert ok(rlrun(home, "ls")).stderr.startswith("no runs in")
    rebuilt = ok(rlrun(home, "db", "rebuild"))
    assert rebuilt.stderr.startswith("restored 5 runs (7 sessions, ")
    assert "0 were already in the registry" in rebuilt.stderr

    assert ok(rlrun(home, "ls", "--json", "--all")).json() == before
    for run_id, document in shown.items():
        assert comparable(ok(rlrun(home, "show", run_id, "--json")).json()) == document, run_id

    again = ok(rlrun(home, "db", "rebuild", "--json")).json()
    assert (again["restored"], len(again["already_known"]), again["problems"]) == ([], 5, [])
    gc = ok(rlrun(home, "gc", "--dry-run", "--json")).json()  # rows and folders agree
    assert (gc["orphans"], gc["temporaries"], gc["retired"], gc["missing"]) == ([], [], [], [])

    # The rebuilt registry is as good as the first: the stopped run resumes from its snapshot.
    resumed = ok(invoke(home, "resume", "delta", "--json"))
    assert "from snapshot at frame 1,500" in resumed.stderr and resumed.json()["status"] == "finished"


def test_a_folder_that_cannot_be_read_is_named_and_the_rest_restored(history: Path, tmp_path: Path) -> None:
    import shutil

    home = tmp_path / "copy"
    shutil.copytree(history, home, ignore=shutil.ignore_patterns("registry.sqlite*"))
    broken = sorted(p for p in home.iterdir() if (p / "run.json").is_file())[0]
    (broken / "run.json").write_text("{not json")
    done = ok(rlrun(home, "db", "rebuild"))
    assert f"skipped {broken.name}: JSONDecodeError" in done.stderr
    total = len([p for p in history.iterdir() if (p / "run.json").is_file()])
    assert f"restored {total - 1} runs" in done.stderr
