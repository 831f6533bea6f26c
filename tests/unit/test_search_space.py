"""The search block (rlrun.search.space) and why suggestions replay: pure functions, no training."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rlrun.errors import SpecError
from rlrun.registry.records import TrialRecord
from rlrun.search import space as search_space
from rlrun.spec import builtin_document, validate_spec


def base() -> dict[str, Any]:
    return validate_spec(builtin_document("reinforce_cartpole")).to_json()


def test_every_kind_parses_over_the_complete_spec() -> None:
    document = base()
    document["agent"]["optimizer"]["lr"] = {"kind": "linear", "start": 0.002, "end": 0.0001, "to_frame": "max_frame"}
    block = {
        "agent.optimizer.lr.start": {"loguniform": [1e-4, 3e-3]},
        "agent.value_coef": {"uniform": [0.1, 1.0]},
        "agent.episodes_per_update": {"randint": [2, 8]},
        "agent.network.hidden": {"choice": [[32, 32], [64, 64]]},
        "agent.baseline": {"grid": ["mean", "value"]},
    }
    dimensions = search_space.parse(block, validate_spec(document).to_json())
    assert [(d.path, d.kind) for d in dimensions] == [(path, next(iter(d))) for path, d in block.items()]
    assert search_space.load(json.dumps({d.path: d.to_json() for d in dimensions})) == dimensions
    params = {"agent.optimizer.lr.start": 0.001, "agent.network.hidden": [32, 32]}
    applied = search_space.apply(document, params)
    assert applied["agent"]["optimizer"]["lr"]["start"] == 0.001 and applied["agent"]["network"]["hidden"] == [32, 32]
    assert document["agent"]["network"]["hidden"] == [64, 64]  # a copy
    assert not search_space.is_grid(dimensions) and search_space.grid_size(dimensions[-1:]) == 2


@pytest.mark.parametrize(
    ("block", "problem"),
    [
        ({"agent.gama": {"uniform": [0.9, 0.99]}}, 'not a setting of this spec; did you mean "agent.gamma"'),
        ({"agent.gamma": {"uniform": [0.99, 0.9]}}, "low must be below high"),
        ({"agent.gamma": [0.9, 0.99]}, "is not a distribution"),
        ({"agent.gamma": {"randint": [0, 1.5]}}, "randint takes whole numbers"),
        ({"agent.baseline": {"choice": ["mean", "mean"]}}, "a value is listed twice"),
        ({"meta.sessions": {"randint": [0, 4]}}, "0 does not fit (meta.sessions = 0: input should be greater than 0)"),
        ({"name": {"choice": ["a", "b"]}}, "cannot be searched"),
    ],
)
def test_a_bad_dimension_is_one_line_naming_it(block: dict[str, Any], problem: str) -> None:
    with pytest.raises(SpecError) as refused:
        search_space.parse(block, base())
    assert len(refused.value.problems) == 1
    line = refused.value.problems[0]
    assert line.startswith(f"search.{next(iter(block))}") and problem in line, line


def _trial(number: int, params: dict[str, Any], value: float) -> TrialRecord:
    return TrialRecord(number, "s", number, None, json.dumps(params), "complete", value, "[]", "{}", None, 0.0, 0.0)


def test_a_suggestion_depends_only_on_the_seed_the_number_and_the_ended_trials() -> None:
    """Why a resumed search suggests what the uninterrupted one did: each suggestion is a fresh
    study's, told the ended trials, its sampler seeded by (seed, trial number). A long-lived seeded
    sampler would not replay: its generator has moved on by the time it suggests trial n."""
    pytest.importorskip("optuna")
    from rlrun.search import Settings
    from rlrun.search.optuna_adapter import decode_params, new_study, optuna_distributions

    dimensions = search_space.parse(
        {"agent.optimizer.lr": {"loguniform": [1e-4, 3e-3]}, "agent.baseline": {"choice": ["mean", "value"]}}, base()
    )
    settings = Settings(trials=14, random_trials=3)

    def suggest(history: list[TrialRecord], number: int) -> dict[str, Any]:
        study = new_study(settings, dimensions, history, number, 1000)
        return decode_params(study.ask(optuna_distributions(dimensions)).params, dimensions)

    history: list[TrialRecord] = []
    for number in range(6):  # past the random start: TPE models the scores
        params = suggest(history, number)
        history.append(_trial(number, params, -abs(params["agent.optimizer.lr"] - 1e-3)))
    assert suggest(history, 6) == suggest(list(history), 6)  # again, from scratch: the same
    assert suggest(history, 6) != suggest(history, 7)  # the number seeds it
    assert suggest(history, 6) != suggest(history[:-1], 6)  # and the history informs it

    import optuna

    long_lived = optuna.create_study(
        direction="maximize", sampler=optuna.samplers.TPESampler(seed=1, n_startup_trials=3)
    )
    replayed = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=1, n_startup_trials=3))
    distributions = optuna_distributions(dimensions)
    for trial in history:
        asked = long_lived.ask(distributions)
        long_lived.tell(asked, trial.value)
        replayed.add_trial(
            optuna.trial.create_trial(params=asked.params, distributions=distributions, value=trial.value)
        )
    assert long_lived.ask(distributions).params != replayed.ask(distributions).params
