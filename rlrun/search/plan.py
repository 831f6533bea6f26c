"""Planning a search, by its scheduler: the table of schedulers (`SCHEDULERS`) says, for each, the
settings only it takes, its planner (everything checked before anything is written), how its
recorded settings read back, and its driver. `plan_search` plans a search for the command line and
the Python API alike, each setting not given at its default; `recorded_plan` is the plan of a
recorded search, to continue it; `driver_for` the driver of a plan's settings."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlrun.errors import BadInput
from rlrun.registry.records import SearchRecord
from rlrun.search import space as search_space
from rlrun.search.driver import Driver
from rlrun.search.population import PbtDriver, PbtSettings, plan_population
from rlrun.search.settings import SearchPlan, Settings
from rlrun.search.trials_plan import plan_trials
from rlrun.spec import recorded_spec


@dataclass(frozen=True)
class Scheduler:
    """One way a search trains its runs, and all that differs by it."""

    serves: str
    """What it does, in words."""
    options: dict[str, str]
    """The settings only it takes: `plan_search`'s keyword, and its command-line option."""
    misplaced: str
    """What is said when its `options` are given to another scheduler ("{options}": those given)."""
    plan: Callable[..., SearchPlan]
    """Its planner: (source, overrides, *, metric, parallel, **its options) -> SearchPlan."""
    settings: type[Settings]
    read: Callable[[dict[str, Any]], Settings]
    """Its settings as recorded with the search, read back."""
    driver: type[Driver]


SCHEDULERS: dict[str, Scheduler] = {
    "trials": Scheduler(
        "a run per trial, suggested by Optuna (`rlrun.search.trials_plan`)",
        {"trials": "--trials", "sampler": "--sampler", "pruner": "--pruner", "prune_after": "--prune-after"},
        "{options} belong to a search of trials; --scheduler pbt trains its population generation by"
        " generation: drop them",
        plan_trials,
        Settings,
        lambda document: Settings(**document),
        Driver,
    ),
    "pbt": Scheduler(
        "population-based training (`rlrun.search.population`)",
        {
            "population": "--population",
            "interval": "--interval",
            "quantile": "--quantile",
            "resample_probability": "--resample",
            "factors": "--factors",
        },
        "{options} set up population-based training: add --scheduler pbt",
        plan_population,
        PbtSettings,
        PbtSettings.from_json,
        PbtDriver,
    ),
}
RECORDED_DEFAULT = "trials"
"""The scheduler of recorded settings that name none (a search of trials records no "scheduler")."""


def plan_search(
    source: str | Path | dict[str, Any],
    overrides: list[str] | None = None,
    *,
    scheduler: str = "trials",
    trials: int | None = None,
    metric: str | None = None,
    sampler: str | None = None,
    pruner: str | None = None,
    parallel: int = 1,
    prune_after: int | None = None,
    population: int | None = None,
    interval: int | str | None = None,
    quantile: float | None = None,
    resample_probability: float | None = None,
    factors: Sequence[float] | str | None = None,
) -> SearchPlan:
    """The search a spec with a `search` block asks for: `trials` trials suggested by Optuna
    (`scheduler` "trials"), or a population of `population` members trained by PBT, an exploit
    every `interval` frames (a count or a size such as "50k"; `scheduler` "pbt"). A setting left
    None takes its default (metric eval_mean; sampler tpe, or grid for an all-grid space; pruner
    median after PRUNE_AFTER trials; PBT's quantile, resample probability and factors: `pbt.Options`);
    a setting of another scheduler is refused. BadInput (or SpecError) when it cannot run, before
    anything is written or Optuna is imported.

    Args:
        source: A spec with a `search` block: a file, a built-in name, or a dict.
        overrides: Edits to the base spec as `key=value` (`--set`).
        scheduler: "trials" (a run per trial, suggested by Optuna) or "pbt" (population-based training).
        trials: Trials to run; None: every point of an all-grid space.
        metric: A trial's score: "eval_mean" (final evaluation; the default) or "best_eval", over sessions.
        sampler: "tpe" (the default), "random", or "grid" (the default when every dimension is a grid).
        pruner: Stop poor trials early: "median" (the default), "halving" or "none".
        parallel: Trials (PBT: members of a generation) trained at a time.
        prune_after: Trials the median pruner waits for before it prunes (default 5).
        population: PBT: members.
        interval: PBT: frames between exploits, a count or a size ("50k").
        quantile: PBT: the bottom fraction that copies the top one (default 0.25).
        resample_probability: PBT: the chance a value is drawn again rather than scaled (default 0.25).
        factors: PBT: the factors that scale an explored value (default 0.8, 1.2; or "0.8,1.2").

    Returns:
        The search, decided: the base spec, its space and the settings, for `run_search`.
    """
    if scheduler not in SCHEDULERS:
        raise BadInput(f"--scheduler {scheduler!r} is not one of {', '.join(SCHEDULERS)}; use one of them")
    given: dict[str, Any] = {
        "trials": trials,
        "sampler": sampler,
        "pruner": pruner,
        "prune_after": prune_after,
        "population": population,
        "interval": interval,
        "quantile": quantile,
        "resample_probability": resample_probability,
        "factors": factors,
    }
    for name, other in SCHEDULERS.items():
        extra = [option for key, option in other.options.items() if name != scheduler and given[key] is not None]
        if extra:
            raise BadInput(other.misplaced.format(options=", ".join(extra)))
    chosen = SCHEDULERS[scheduler]
    own = {key: given[key] for key in chosen.options}
    return chosen.plan(source, overrides, metric="eval_mean" if metric is None else metric, parallel=parallel, **own)


def recorded_plan(record: SearchRecord) -> SearchPlan:
    """The search as it was recorded: its spec, space and settings, to continue it."""
    document = json.loads(record.settings_json)
    settings = SCHEDULERS[document.get("scheduler", RECORDED_DEFAULT)].read(document)
    spec = recorded_spec(json.loads(record.spec_json))
    return SearchPlan(spec, search_space.load(record.space_json), settings, json.loads(record.space_json))


def driver_for(settings: Settings) -> type[Driver]:
    """The driver of a search with these settings (its scheduler's)."""
    return next(s.driver for s in SCHEDULERS.values() if type(settings) is s.settings)
