"""A search's settings left unsaid take their defaults in the library (`rlrun.search.plan_search`),
not in the command line: a notebook gets the search `rlrun search` would plan. No Optuna needed:
the PBT planner itself is replaced by one that shows what it was given."""

from __future__ import annotations

from typing import Any

import pytest

from rlrun.errors import BadInput
from rlrun.search import pbt, plan_search
from rlrun.spec import builtin_document


def document() -> dict[str, Any]:
    found = builtin_document("ppo_cartpole")
    found["search"] = {"agent.optimizer.lr": {"loguniform": [1e-4, 1e-3]}}
    return found


@pytest.fixture
def given_to_pbt(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What `plan_search(..., scheduler="pbt")` hands the PBT planner."""
    from rlrun.search import population

    seen: dict[str, Any] = {}

    def plan_pbt(source: Any, overrides: Any = None, **settings: Any) -> str:
        seen.update(settings, source=source, overrides=overrides)
        return "planned"

    monkeypatch.setattr(population, "plan_pbt", plan_pbt)
    return seen


def test_pbt_settings_not_given_take_the_librarys_defaults(given_to_pbt: dict[str, Any]) -> None:
    assert plan_search(document(), ["meta.max_frame=100k"], scheduler="pbt", population=4, interval="30k") == "planned"
    options = given_to_pbt["options"]
    assert options == pbt.Options(population=4, interval=30_000)
    assert (
        (options.quantile, options.resample_probability, options.factors)
        == (pbt.QUANTILE, pbt.RESAMPLE_PROBABILITY, pbt.FACTORS)
        == (0.25, 0.25, (0.8, 1.2))
    )
    assert given_to_pbt["metric"] == "eval_mean" and given_to_pbt["parallel"] == 1
    assert given_to_pbt["overrides"] == ["meta.max_frame=100k"]


def test_pbt_settings_given_are_kept(given_to_pbt: dict[str, Any]) -> None:
    plan_search(
        document(),
        scheduler="pbt",
        population=3,
        interval=20_000,
        quantile=0.5,
        resample_probability=0.1,
        factors="0.5,2",
        metric="best_eval",
        parallel=2,
    )
    assert given_to_pbt["options"] == pbt.Options(
        population=3, interval=20_000, quantile=0.5, resample_probability=0.1, factors=(0.5, 2.0)
    )
    assert (given_to_pbt["metric"], given_to_pbt["parallel"]) == ("best_eval", 2)
    plan_search(document(), scheduler="pbt", population=3, interval=20_000, factors=[0.9, 1.1])
    assert given_to_pbt["options"].factors == (0.9, 1.1)


@pytest.mark.parametrize(
    ("settings", "refusal"),
    [
        ({"scheduler": "bandit"}, "--scheduler 'bandit' is not one of trials, pbt"),
        ({"trials": 4, "population": 4, "quantile": 0.5}, "--population, --quantile set up population-based training"),
        ({"scheduler": "pbt", "population": 4, "interval": 1000, "pruner": "none"}, "--pruner belong to a search of"),
        ({"scheduler": "pbt", "population": 4}, "--scheduler pbt needs --population N and --interval FRAMES"),
        ({"scheduler": "pbt", "population": 4, "interval": "1k", "factors": "big"}, "--factors 'big': give numbers"),
    ],
)
def test_settings_of_the_other_scheduler_are_refused(
    given_to_pbt: dict[str, Any], settings: dict[str, Any], refusal: str
) -> None:
    with pytest.raises(BadInput, match=refusal):
        plan_search(document(), **settings)
    assert given_to_pbt == {}


def test_a_parallel_trial_is_told_the_trials_k_places_before_it_never_one_that_ended_sooner() -> None:
    """`--parallel K`: trial n waits for every trial up to n - K and is told those alone, so which
    trial happens to end first (a faster node, a SLURM queue) never changes a suggestion."""
    from rlrun.registry.records import TrialRecord
    from rlrun.search.driver import may_start, told

    def trial(number: int, state: str) -> TrialRecord:
        return TrialRecord(number, "s", number, None, "{}", state, None, "[]", "{}", None, 0.0, None)

    # two at a time: trial 1 ended before trial 0
    ended_out_of_order = [trial(0, "running"), trial(1, "complete")]
    assert not may_start(ended_out_of_order, 2, 2)
    assert may_start(ended_out_of_order, 1, 2) and told(ended_out_of_order, 1, 2) == []
    both = [trial(0, "pruned"), trial(1, "complete"), trial(2, "running")]
    assert may_start(both, 2, 2) and [t.number for t in told(both, 2, 2)] == [0]
    assert may_start(both, 3, 2) and [t.number for t in told(both, 3, 2)] == [0, 1]
    # one at a time: every earlier trial, as before
    assert [t.number for t in told(both, 2, 1)] == [0, 1] and not may_start(both, 3, 1)
