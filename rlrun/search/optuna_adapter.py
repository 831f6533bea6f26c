"""Optuna, behind one door: loaded on use (an optional extra), a fresh in-memory study per
suggestion, told every ended trial (`new_study`), the search space as Optuna's distributions, and
each parameter's importance at the end (`importance`)."""

from __future__ import annotations

import json
import warnings
from typing import TYPE_CHECKING, Any

from rlrun import seeding
from rlrun.errors import BadInput, install_hint
from rlrun.registry.records import TrialRecord
from rlrun.search import space as search_space
from rlrun.search.space import Dimension

if TYPE_CHECKING:
    import optuna

    from rlrun.search.settings import Settings


SAMPLER_STREAM = 101
"""The seeding stream of suggestions (`rlrun.seeding.derive(spec seed, SAMPLER_STREAM, trial)`)."""


def load_optuna() -> Any:
    """Optuna, an optional extra: one line naming the fix when it is missing."""
    try:
        import optuna
    except ImportError:
        raise BadInput(f"searching needs Optuna: {install_hint('search')}") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def new_study(
    settings: Settings, dimensions: list[Dimension], history: list[TrialRecord], number: int, eval_frequency: int
) -> optuna.Study:
    """A new in-memory study told every ended trial, whose sampler is seeded by the trial number:
    what it suggests depends on that history alone."""
    optuna = load_optuna()
    from optuna.trial import TrialState

    seed = seeding.derive(settings.seed, SAMPLER_STREAM, number)
    sampler: Any
    if settings.sampler == "grid":
        # One seed for every trial: it orders the grid, and the trials' grid ids index that order.
        sampler = optuna.samplers.GridSampler(
            {d.path: [json.dumps(v) for v in d.values] for d in dimensions},
            seed=seeding.derive(settings.seed, SAMPLER_STREAM),
        )
    elif settings.sampler == "random":
        sampler = optuna.samplers.RandomSampler(seed=seed)
    else:
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=settings.random_trials)
    study = optuna.create_study(direction="maximize", sampler=sampler, pruner=_pruner(settings, eval_frequency))
    states = {"complete": TrialState.COMPLETE, "pruned": TrialState.PRUNED, "failed": TrialState.FAIL}
    distributions = optuna_distributions(dimensions)
    for trial in history:
        study.add_trial(
            optuna.trial.create_trial(
                state=states[trial.state],
                value=trial.value if trial.state == "complete" else None,
                params=encode_params(trial.params, dimensions),
                distributions=distributions,
                intermediate_values=dict(trial.intermediate),
                system_attrs=json.loads(trial.system_attrs_json),
            )
        )
    return study


def _pruner(settings: Settings, eval_frequency: int) -> Any:
    """Steps are frames. The median pruner compares a trial's score with the median of the earlier
    trials' at the same frame; successive halving keeps the best third at the first evaluation, at
    three times its frame, nine times, … (a fixed first rung, so no rung depends on which trial
    happened to end first)."""
    optuna = load_optuna()
    if settings.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=settings.prune_after)
    if settings.pruner == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=eval_frequency, reduction_factor=3)
    return optuna.pruners.NopPruner()


def optuna_distributions(dimensions: list[Dimension]) -> dict[str, Any]:
    """Optuna's distributions. A choice's values go in as JSON text, so any JSON value (a list of
    layer widths) can be a choice."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    made: dict[str, Any] = {}
    for d in dimensions:
        if d.kind in search_space.LISTS:
            made[d.path] = CategoricalDistribution([json.dumps(v) for v in d.values])
        elif d.kind == "randint":
            made[d.path] = IntDistribution(int(d.values[0]), int(d.values[1]))
        else:
            made[d.path] = FloatDistribution(float(d.values[0]), float(d.values[1]), log=d.kind == "loguniform")
    return made


def encode_params(params: dict[str, Any], dimensions: list[Dimension]) -> dict[str, Any]:
    lists = {d.path for d in dimensions if d.kind in search_space.LISTS}
    return {path: json.dumps(value) if path in lists else value for path, value in params.items()}


def decode_params(params: dict[str, Any], dimensions: list[Dimension]) -> dict[str, Any]:
    lists = {d.path for d in dimensions if d.kind in search_space.LISTS}
    return {d.path: json.loads(params[d.path]) if d.path in lists else params[d.path] for d in dimensions}


IMPORTANCE_METHOD = "PED-ANOVA"
"""How `importance` weighs parameters, as `rlrun show search:` names it: Optuna's PED-ANOVA, its
default since Optuna 4 (fANOVA needs scikit-learn, which the search extra does not bring)."""


def importance(detail: Any) -> dict[str, float] | None:
    """Each parameter's importance to reaching the best scores over the complete trials (Optuna's
    PED-ANOVA), or None when there are too few of them, their scores cannot tell the parameters
    apart, or Optuna is missing."""
    complete = [t for t in detail.trials if t.state == "complete" and t.value is not None]
    dimensions = search_space.load(detail.search.space_json)
    if len(complete) < 2 or len(dimensions) < 1:
        return None
    try:
        optuna = load_optuna()
    except BadInput:
        return None
    study = optuna.create_study(direction="maximize")
    distributions = optuna_distributions(dimensions)
    for trial in complete:
        study.add_trial(
            optuna.trial.create_trial(
                value=trial.value, params=encode_params(trial.params, dimensions), distributions=distributions
            )
        )
    # Optuna warns (a UserWarning, in the middle of rlrun's output) when the trials cannot tell the
    # parameters apart (too few, or tied scores) and then gives them equal shares: no importance.
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            found = dict(
                optuna.importance.get_param_importances(
                    study, evaluator=optuna.importance.PedAnovaImportanceEvaluator()
                )
            )
        except (RuntimeError, ValueError):
            return None
    equal = [w for w in said if "importances will be equal" in str(w.message)]
    return None if equal else found
