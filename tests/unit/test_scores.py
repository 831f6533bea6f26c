"""Scores read as `--json` tells them apart (issue 44): the rule of `rlrun.catalog.scores`, and the views that
put scores side by side (ls, a search's trials, its best trials, the live lines)."""

from __future__ import annotations

import io
import json
from datetime import datetime

import pytest
from rich.console import Console

from rlrun.catalog.scores import score, scores
from rlrun.cli.display import TrainingDisplay
from rlrun.cli.views import runs_table, search_detail, trials_table
from rlrun.registry import RunSummary
from rlrun.registry.records import SearchDetail, SearchRecord, TrialRecord
from rlrun.session import events

NOON = datetime(2025, 5, 1, 12, 0).timestamp()


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.954, "0.954"),
        (0.952, "0.952"),
        (25.5, "25.5"),
        (111.5, "111.5"),
        (500.0, "500.0"),
        (12345.6, "12345.6"),
        (-0.0312, "-0.0312"),
        (0.0, "0.0"),
        (None, "-"),
        (float("nan"), "-"),
    ],
)
def test_a_score_has_four_significant_digits_and_no_exponent(value: float | None, text: str) -> None:
    assert score(value) == text


def test_scores_side_by_side_take_the_decimals_that_tell_them_apart() -> None:
    assert scores([0.95412, 0.95413, 0.9, None]) == ["0.95412", "0.95413", "0.9", "-"]
    assert scores([500.0, 500.0, 499.75]) == ["500.0", "500.0", "499.8"]
    assert scores([500.0, 500.01]) == ["500.0", "500.01"]


def _run(row: int, best: float) -> RunSummary:
    return RunSummary(
        row=row,
        id=f"r{row}",
        name=None,
        spec_name="ppo_cartpole",
        algorithm="ppo",
        env_id="CartPole-v1",
        status="finished",
        num_sessions=1,
        frames_done=1000,
        frames_target=1000,
        best_eval=best,
        created_at=NOON,
        finished_at=NOON,
        session_frame=1000,
    )


def test_ls_tells_apart_best_evaluations_that_round_alike() -> None:
    listed = runs_table([_run(1, 0.954), _run(2, 0.952), _run(3, 0.9541)], total=3)
    best = [line.split()[-4] for line in listed.splitlines()[1:]]
    assert best == ["0.954", "0.952", "0.9541"]


def _search(values: list[float]) -> SearchDetail:
    settings = {"metric": "eval_mean", "sampler": "tpe", "pruner": "none", "seed": 1, "trials": len(values)}
    search = SearchRecord(
        id="q1",
        name=None,
        spec_name="ppo_cartpole",
        spec_json="{}",
        space_json=json.dumps({"agent.optimizer.lr": {"loguniform": [1e-4, 1e-2]}}),
        settings_json=json.dumps(settings),
        status="finished",
        host=None,
        pid=None,
        error=None,
        importance_json=None,
        created_at=NOON,
        finished_at=NOON,
    )
    trials = [
        TrialRecord(
            id=i + 1,
            search_id="q1",
            number=i,
            run_id=f"r{i}",
            params_json=json.dumps({"agent.optimizer.lr": 1e-3}),
            state="complete",
            value=value,
            intermediate_json=json.dumps([[1000, value]]),
            system_attrs_json="{}",
            note=None,
            created_at=NOON,
            finished_at=NOON,
        )
        for i, value in enumerate(values)
    ]
    return SearchDetail(search, trials)


def test_a_searchs_trials_and_best_trials_are_told_apart() -> None:
    detail = _search([0.9541, 0.9542, 0.9543])
    rows = trials_table(detail).splitlines()[1:]
    assert [row.split()[-1] for row in rows] == ["0.9541", "0.9542", "0.9543"]
    best = [line for line in search_detail(detail).splitlines() if line.startswith("  trial ")]
    assert [line.split()[4] for line in best] == ["0.9543", "0.9542", "0.9541"]


def test_the_live_lines_show_a_score_as_the_registry_holds_it() -> None:
    out = io.StringIO()
    display = TrainingDisplay(Console(file=out, width=200), live=False)
    display(events.SessionStarted(0, seed=1, frame=0, max_frame=2000))
    display(events.Evaluated(0, frame=1000, mean=0.954, std=0.0213, is_best=True))
    display(events.Progress(0, frame=1000, max_frame=2000, episode=3, frames_per_second=100.0, return_mean=0.952))
    assert "s0 eval at 1k: 0.954 ± 0.0213 (best)" in out.getvalue()
    assert "return 0.952  eval 0.954" in out.getvalue()
