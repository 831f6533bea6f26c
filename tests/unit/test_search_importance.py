"""A search's parameter importance (issue 44): Optuna's warning about trials that cannot tell the
parameters apart stays out of rlrun's output, and such trials give no importance rather than equal
shares; `show` names the method that computed it."""

from __future__ import annotations

import json
import warnings
from datetime import datetime

import pytest

from rlrun.cli.views import search_detail
from rlrun.registry.records import SearchDetail, SearchRecord, TrialRecord

NOON = datetime(2025, 5, 1, 12, 0).timestamp()
SPACE = {"agent.optimizer.lr": {"loguniform": [1e-4, 1e-2]}, "agent.entropy_coef": {"uniform": [0.0, 0.05]}}


def _search(values: list[float], importance: dict[str, float] | None = None) -> SearchDetail:
    settings = {"metric": "eval_mean", "sampler": "tpe", "pruner": "none", "seed": 1, "trials": len(values)}
    search = SearchRecord(
        id="q1",
        name=None,
        spec_name="ppo_cartpole",
        spec_json="{}",
        space_json=json.dumps(SPACE),
        settings_json=json.dumps(settings),
        status="finished",
        host=None,
        pid=None,
        error=None,
        importance_json=None if importance is None else json.dumps(importance),
        created_at=NOON,
        finished_at=NOON,
    )
    trials = [
        TrialRecord(
            id=i + 1,
            search_id="q1",
            number=i,
            run_id=f"r{i}",
            params_json=json.dumps({"agent.optimizer.lr": 1e-3 * (i + 1), "agent.entropy_coef": 0.01 * i}),
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


def test_tied_scores_give_no_importance_and_no_warning() -> None:
    pytest.importorskip("optuna", reason="the search extra is not installed (pip install 'rlrun[search]')")
    from rlrun.search.optuna_adapter import importance

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning that reaches the user fails the test
        assert importance(_search([0.954, 0.954, 0.954])) is None
        assert importance(_search([0.954, 0.5, 0.2, 0.1])) is not None


def test_show_names_the_method_that_weighed_the_parameters() -> None:
    pytest.importorskip("optuna", reason="the search extra is not installed (pip install 'rlrun[search]')")
    from rlrun.search.optuna_adapter import IMPORTANCE_METHOD

    shown = search_detail(_search([0.9, 0.5], importance={"agent.optimizer.lr": 0.7, "agent.entropy_coef": 0.3}))
    assert f"parameter importance ({IMPORTANCE_METHOD} over the complete trials):" in shown
