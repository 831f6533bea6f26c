"""Population-based training's decisions (`rlrun.search.pbt`): pure functions of the seed and the
recorded scores; explored values written as step schedules that are consistent edits; settings
that cannot change mid-run refused when the search is planned."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from rlrun.errors import BadInput
from rlrun.search import pbt
from rlrun.search.space import Dimension
from rlrun.spec import builtin_document, validate_spec
from rlrun.spec.consistency import check_edit

LR = Dimension("agent.optimizer.lr", "loguniform", (1e-4, 1e-2))
ENTROPY = Dimension("agent.entropy_coef", "uniform", (0.0, 0.1))
EPOCHS = Dimension("agent.n_epochs", "choice", (2, 4, 8))
DIMENSIONS = [LR, ENTROPY]


def population(size: int, seed: int = 7) -> list[dict[str, float]]:
    return [pbt.initial_params(DIMENSIONS, seed, member) for member in range(size)]


def test_initial_values_depend_on_the_seed_and_member_only() -> None:
    assert population(4) == population(4)
    assert population(4, seed=8) != population(4)
    assert len({json.dumps(p) for p in population(4)}) == 4
    for params in population(16):
        assert 1e-4 <= params[LR.path] <= 1e-2 and 0 <= params[ENTROPY.path] <= 0.1


@pytest.mark.parametrize(
    ("size", "quantile", "count"),
    [(2, 0.25, 1), (4, 0.25, 1), (5, 0.25, 2), (8, 0.25, 2), (4, 0.5, 2), (5, 0.5, 2), (3, 0.9, 1)],
)
def test_exploit_count_is_the_quantile_rounded_up_at_most_half(size: int, quantile: float, count: int) -> None:
    assert pbt.exploit_count(size, quantile) == count


def test_the_bottom_quantile_copies_the_top_and_explores_the_rest_go_on() -> None:
    params = population(8)
    scores: list[float | None] = [10.0, 50.0, 30.0, None, 80.0, 20.0, 70.0, 60.0]
    decisions = pbt.decide(DIMENSIONS, seed=7, generation=3, scores=scores, params=params)
    assert decisions == pbt.decide(DIMENSIONS, seed=7, generation=3, scores=scores, params=params)
    losers = {d.member for d in decisions if d.exploited}
    assert losers == {3, 0}, "the failed member and the lowest score"
    for decision in decisions:
        if decision.exploited:
            assert decision.source in {4, 6}, "a member of the top quantile"
            assert decision.params != params[decision.source]
            source = params[decision.source]
            assert set(decision.mutated) == {p for p in decision.params if decision.params[p] != source[p]}
        else:
            assert decision.params == params[decision.member] and decision.mutated == ()
    other = pbt.decide(DIMENSIONS, seed=7, generation=4, scores=scores, params=params)
    assert [d.params for d in other if d.exploited] != [d.params for d in decisions if d.exploited], (
        "each generation draws afresh"
    )


def test_ties_and_nan_rank_deterministically() -> None:
    params = population(4)
    decisions = pbt.decide(DIMENSIONS, seed=1, generation=1, scores=[5.0, 5.0, float("nan"), 5.0], params=params)
    assert [d.member for d in decisions if d.exploited] == [2]
    decisions = pbt.decide(DIMENSIONS, seed=1, generation=1, scores=[5.0, 5.0, 5.0, 5.0], params=params)
    assert [d.member for d in decisions if d.exploited] == [0] and decisions[0].source == 3


def test_mutation_scales_by_a_factor_within_bounds_or_resamples() -> None:
    rng = random.Random(0)
    moved = [pbt.mutate(LR, 1e-3, rng, 0.0, (0.8, 1.2)) for _ in range(50)]
    assert set(moved) == {1e-3 * 0.8, 1e-3 * 1.2}
    assert {pbt.mutate(LR, 1e-2, rng, 0.0, (1.5,)) for _ in range(5)} == {1e-2}, "clipped to the range"
    resampled = [pbt.mutate(LR, 1e-3, rng, 1.0, (0.8, 1.2)) for _ in range(50)]
    assert len(set(resampled)) == 50 and all(1e-4 <= v <= 1e-2 for v in resampled)
    neighbours = {pbt.mutate(EPOCHS, 4, rng, 0.0, (0.8, 1.2)) for _ in range(50)}
    assert neighbours == {2, 8}, "a choice moves to a neighbouring candidate"
    integers = {pbt.mutate(Dimension("x", "randint", (1, 100)), 10, rng, 0.0, (0.8, 1.2)) for _ in range(20)}
    assert integers == {8, 12}


def test_a_switched_schedule_is_a_consistent_edit_of_the_past() -> None:
    document = builtin_document("ppo_cartpole")
    document["agent"]["optimizer"]["lr"] = 3e-4
    first = validate_spec(document)
    once = pbt.switch_after(3e-4, 1000, 5e-4)
    assert once == {"kind": "piecewise", "points": [[0, 3e-4], [1001, 5e-4]], "interpolation": "step"}
    twice = pbt.switch_after(once, 2000, 4e-4)
    assert twice["points"] == [[0, 3e-4], [1001, 5e-4], [2001, 4e-4]]
    assert pbt.value_after(twice) == 4e-4 and pbt.switch_after(twice, 3000, 4e-4) == twice
    for frame, schedule in ((1000, once), (2000, twice)):
        document["agent"]["optimizer"]["lr"] = schedule
        edited = validate_spec(document)
        assert [
            c for c in check_edit(first if frame == 1000 else _with(document, once), edited, frame) if not c.allowed
        ] == []
        assert edited.agent.optimizer.lr.value(frame, 10_000) != edited.agent.optimizer.lr.value(frame + 1, 10_000)
    document["agent"]["optimizer"]["lr"] = pbt.switch_after(3e-4, 999, 5e-4)
    refused = check_edit(first, validate_spec(document), 1000)
    assert [c.path for c in refused if not c.allowed] == ["agent.optimizer.lr"], "switched inside the past: refused"
    with pytest.raises(ValueError, match="PBT writes numbers and step schedules only"):
        pbt.switch_after({"kind": "linear", "start": 1, "end": 0}, 10, 0.5)


def _with(document: dict, schedule: object) -> object:
    changed = json.loads(json.dumps(document))
    changed["agent"]["optimizer"]["lr"] = schedule
    return validate_spec(changed)


def test_schedules_tied_to_the_budget_are_pinned_to_the_members_budget() -> None:
    document = builtin_document("ppo_cartpole")
    document["agent"]["clip_range"] = {"kind": "linear", "start": 0.2, "end": 0.0}
    pinned = pbt.pin_max_frame(document, 50_000)
    assert pinned["agent"]["clip_range"]["to_frame"] == 50_000 and "from_frame" not in pinned["agent"]["clip_range"]
    assert pinned["agent"]["optimizer"]["lr"]["to_frame"] == 100_000, "a fixed frame stays"
    assert document["agent"]["clip_range"] == {"kind": "linear", "start": 0.2, "end": 0.0}, "a copy"


def test_only_scheduled_settings_may_be_searched() -> None:
    schedules = {"agent.optimizer.lr", "agent.entropy_coef"}
    assert pbt.mutation_problems(DIMENSIONS, schedules) == []
    (problem,) = pbt.mutation_problems([EPOCHS], schedules)
    assert problem.startswith("search.agent.n_epochs: PBT changes values mid-run") and "agent.optimizer.lr" in problem
    (problem,) = pbt.mutation_problems([Dimension("agent.entropy_coef", "choice", ("a", "b"))], schedules)
    assert "numbers" in problem


def test_options_are_checked() -> None:
    assert pbt.Options(population=4, interval=1000).problems(10_000) == []
    found = pbt.Options(population=1, interval=20_000, quantile=0.75, resample_probability=2, factors=(0.0,)).problems(
        10_000
    )
    assert [p.split(" ")[0] for p in found] == ["--population", "--interval", "--quantile", "--resample", "--factors"]


def test_a_search_of_a_structural_setting_is_refused_when_planned(tmp_path: Path) -> None:
    pytest.importorskip("optuna")
    from rlrun.search.population import plan_pbt

    document = builtin_document("ppo_cartpole")
    document["search"] = {"agent.n_epochs": {"choice": [2, 4]}, "agent.optimizer.lr": {"loguniform": [1e-4, 1e-3]}}
    with pytest.raises(BadInput, match=r"search\.agent\.n_epochs: PBT changes values mid-run"):
        plan_pbt(document, options=pbt.Options(population=4, interval=10_000))
    del document["search"]["agent.n_epochs"]
    plan = plan_pbt(document, options=pbt.Options(population=4, interval=30_000))
    assert plan.settings.trials == 4 * 4 and plan.spec.agent.clip_range.to_frame == 100_000
