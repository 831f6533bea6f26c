"""`meta.arithmetic`, the revision of the learning arithmetic a run trains with: new runs take the
newest, a spec recorded before the setting existed reads as revision 1 (the arithmetic it trained
with), and an edit at resume that does not name it keeps the run's."""

from __future__ import annotations

import pytest

from rlrun.errors import SpecError
from rlrun.spec import ARITHMETIC, builtin_document, load_spec, recorded_spec
from rlrun.spec.consistency import fork_conflicts
from rlrun.training.api import as_recorded


def test_new_specs_take_the_newest_revision_and_record_it() -> None:
    spec = load_spec("sac_pendulum")
    assert ARITHMETIC >= 2 and spec.meta.arithmetic == ARITHMETIC
    assert spec.to_json()["meta"]["arithmetic"] == ARITHMETIC


def test_a_spec_recorded_before_the_setting_existed_trained_with_revision_1() -> None:
    old = builtin_document("sac_pendulum")
    assert "arithmetic" not in old["meta"]
    assert recorded_spec(old).meta.arithmetic == 1
    assert "arithmetic" not in old["meta"]  # the record itself is left as it was
    assert recorded_spec(load_spec("sac_pendulum", ["meta.arithmetic=1"]).to_json()).meta.arithmetic == 1
    assert recorded_spec(load_spec("sac_pendulum").to_json()).meta.arithmetic == ARITHMETIC


def test_an_edit_that_does_not_name_it_keeps_the_runs_revision() -> None:
    run = recorded_spec(builtin_document("sac_pendulum"))  # an old run: revision 1
    edited_file = load_spec(builtin_document("sac_pendulum"), ["meta.max_frame=40k"])  # says nothing of it
    assert edited_file.meta.arithmetic == ARITHMETIC
    assert as_recorded(edited_file, run).meta.arithmetic == 1
    named = load_spec(builtin_document("sac_pendulum"), [f"meta.arithmetic={ARITHMETIC}"])
    assert as_recorded(named, run).meta.arithmetic == ARITHMETIC  # named: the edit's (then refused as structural)
    assert as_recorded(edited_file).meta.arithmetic == ARITHMETIC  # a new run: the newest


def test_a_fork_may_move_a_run_to_another_revision() -> None:
    old = recorded_spec(builtin_document("sac_pendulum"))
    assert fork_conflicts(old, load_spec("sac_pendulum", [f"meta.arithmetic={ARITHMETIC}"])) == []


@pytest.mark.parametrize("value", ["0", str(ARITHMETIC + 1), '"fast"'])
def test_an_unknown_revision_is_a_spec_error_naming_the_setting(value: str) -> None:
    with pytest.raises(SpecError) as raised:
        load_spec("sac_pendulum", [f"meta.arithmetic={value}"])
    assert "meta.arithmetic" in str(raised.value)


def test_a_search_recorded_before_the_setting_keeps_revision_1_for_its_trials_yet_to_come() -> None:
    """A search resumed after the setting appeared suggests its remaining trials from its recorded
    base spec: revision 1, as its first trials trained."""
    import json

    from rlrun.registry.records import SearchRecord
    from rlrun.search.plan import Settings, recorded_plan

    space = {"agent.optimizer.lr": {"loguniform": [1e-4, 3e-3]}}
    record = SearchRecord(
        "sa00000001",
        None,
        "sac_pendulum",
        json.dumps(builtin_document("sac_pendulum")),
        json.dumps(space),
        json.dumps(Settings(trials=3).to_json()),
        "crashed",
        None,
        None,
        None,
        None,
        0.0,
        None,
    )
    assert recorded_plan(record).spec.meta.arithmetic == 1


def test_the_documented_table_is_the_table_of_flags() -> None:
    """docs/explanation/arithmetic-revisions.md shows `rlrun.arithmetic.REVISIONS` row by row."""
    from pathlib import Path

    from rlrun.arithmetic import REVISIONS, introduced

    page = (Path(__file__).resolve().parents[2] / "docs" / "explanation" / "arithmetic-revisions.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| ") and line.split("|")[1].strip().isdigit()]
    assert rows == [
        f"| {n} | {', '.join(f'`{f}`' for f in introduced(n)) or '(none)'} | {a.changes} |"
        for n, a in REVISIONS.items()
    ]
    assert max(REVISIONS) == ARITHMETIC and all(introduced(n) for n in REVISIONS if n > 1)


def test_code_reads_flags_never_revision_numbers() -> None:
    """No module compares a revision number (`arithmetic >= 2`): each asks its flag."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "rlrun"
    compared = re.compile(r"arithmetic\s*(>=|<=|==|!=|>|<)\s*\d|\d\s*(>=|<=|==|!=|>|<)\s*\S*arithmetic\b")
    found = [
        f"{path.relative_to(root)}:{n}"
        for path in root.rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if compared.search(line)
    ]
    assert found == []
