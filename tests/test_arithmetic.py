"""A run keeps the learning arithmetic it started with (`meta.arithmetic`): SAC's revision 2 flushes
subnormal floats while it learns and revision 1 keeps them (whether that shows in the bits depends
on the run and the CPU, so no test asserts it: tests/unit/test_arithmetic_revisions.py holds what
each revision changes); a run recorded before the setting existed resumes exactly as revision 1, and an edit to another
revision is refused at resume (a fork may make it)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from helpers import builtin_for, invoke, rlrun
from same_run import BUDGET, assert_same_run, final_state, reference_state, resume_ok, train

from rlrun.paths import REGISTRY_FILE
from rlrun.spec import ARITHMETIC

pytestmark = pytest.mark.slow  # real trainings in subprocesses

SAC = builtin_for("sac")


def forget_arithmetic(home: Path) -> None:
    """Make the home's run one recorded before `meta.arithmetic` existed: its spec revisions
    without the setting, as the rlrun of the time wrote them."""
    with sqlite3.connect(home / REGISTRY_FILE) as db:
        for row_id, spec_json in db.execute("SELECT id, spec_json FROM spec_revisions").fetchall():
            spec = json.loads(spec_json)
            del spec["meta"]["arithmetic"]
            db.execute("UPDATE spec_revisions SET spec_json = ? WHERE id = ?", (json.dumps(spec), row_id))


@pytest.fixture(scope="module")
def straight_revision_1(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    return reference_state(tmp_path_factory, SAC, "--frames", str(BUDGET), "--set", "meta.arithmetic=1")


def test_a_run_recorded_before_the_setting_resumes_exactly_with_revision_1(
    straight_revision_1: dict[str, object], tmp_path: Path
) -> None:
    assert train(tmp_path, SAC, "--frames", str(BUDGET // 2), "--set", "meta.arithmetic=1").code == 0
    forget_arithmetic(tmp_path)
    resume_ok(tmp_path, "latest", "--frames", str(BUDGET))
    assert_same_run(straight_revision_1, final_state(tmp_path))
    shown = rlrun(tmp_path, "show", "latest", "--json").json()
    assert [r["spec"]["meta"].get("arithmetic") for r in shown["spec_revisions"]] == [None, 1]


def test_moving_a_run_to_another_revision_is_refused_at_resume_and_a_fork_may(tmp_path: Path) -> None:
    assert train(tmp_path, SAC, "--frames", "1000", "--set", "meta.arithmetic=1").code == 0
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    refused = invoke(tmp_path, "resume", "latest", "--frames", "2000", "--set", f"meta.arithmetic={ARITHMETIC}")
    assert refused.code == 2, refused.stderr
    assert refused.stderr.splitlines()[-1].startswith("error: edit refused: meta.arithmetic would change run"), (
        refused.stderr
    )
    assert "--fork" in refused.stderr.splitlines()[-1]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    forked = invoke(
        tmp_path, "resume", "latest", "--fork", "--frames", "2000", "--set", f"meta.arithmetic={ARITHMETIC}", "--json"
    )
    assert forked.code == 0, forked.stderr
    fork = rlrun(tmp_path, "show", "latest", "--json").json()
    assert fork["run"]["status"] == "finished" and fork["run"]["parent_id"] is not None
    assert fork["spec_revisions"][-1]["spec"]["meta"]["arithmetic"] == ARITHMETIC
