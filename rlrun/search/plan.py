"""Planning a search: its settings and its plan, everything checked before anything is written
(`plan_search`: trials suggested by Optuna, or a PBT population, each setting not given at its
default, for the command line and the Python API alike), and the plan of a recorded search, to
continue it (`recorded_plan`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlrun.errors import BadInput
from rlrun.registry.records import SearchRecord
from rlrun.search import pbt
from rlrun.search import space as search_space
from rlrun.search.optuna_adapter import load_optuna
from rlrun.search.space import Dimension
from rlrun.spec import Spec, apply_overrides, read_document, recorded_spec, validate_spec
from rlrun.trackers import check_installed

METRICS = ("eval_mean", "best_eval")
"""eval_mean: each session's evaluation at the end of training; best_eval: each session's best
evaluation. Either way averaged over the run's sessions."""
SAMPLERS = ("tpe", "random", "grid")
PRUNERS = ("median", "halving", "none")
SCHEDULERS = ("trials", "pbt")
"""trials: a run per trial, suggested by Optuna; pbt: population-based training (`rlrun.search.population`)."""
RANDOM_TRIALS = 10
"""Trials TPE samples at random before it models the scores (Optuna's default)."""
PRUNE_AFTER = 5
"""Trials the median pruner waits for before it prunes (Optuna's default)."""


@dataclass(frozen=True)
class Settings:
    """How a search suggests, scores and prunes; stored with it, so a resume does the same."""

    trials: int
    metric: str = "eval_mean"
    sampler: str = "tpe"
    pruner: str = "median"
    seed: int = 0
    parallel: int = 1
    random_trials: int = RANDOM_TRIALS
    prune_after: int = PRUNE_AFTER

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SearchPlan:
    """A search decided before anything is written: the base spec, its space and the settings."""

    spec: Spec
    dimensions: list[Dimension]
    settings: Settings
    space: dict[str, Any] = field(default_factory=dict)


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
    a setting of the other scheduler is refused. BadInput (or SpecError) when it cannot run, before
    anything is written or Optuna is imported."""
    population_settings = {
        "--population": population,
        "--interval": interval,
        "--quantile": quantile,
        "--resample": resample_probability,
        "--factors": factors,
    }
    if scheduler not in SCHEDULERS:
        raise BadInput(f"--scheduler {scheduler!r} is not one of {', '.join(SCHEDULERS)}; use one of them")
    chosen_metric = "eval_mean" if metric is None else metric
    if scheduler == "pbt":
        return _plan_population(
            source,
            overrides,
            population,
            interval,
            quantile,
            resample_probability,
            factors,
            metric=chosen_metric,
            parallel=parallel,
            trial_settings={"--trials": trials, "--sampler": sampler, "--pruner": pruner, "--prune-after": prune_after},
        )
    extra = [option for option, value in population_settings.items() if value is not None]
    if extra:
        raise BadInput(f"{', '.join(extra)} set up population-based training: add --scheduler pbt")
    return _plan_trials(
        source,
        overrides,
        trials=trials,
        metric=chosen_metric,
        sampler=sampler,
        pruner="median" if pruner is None else pruner,
        parallel=parallel,
        prune_after=PRUNE_AFTER if prune_after is None else prune_after,
    )


def _plan_population(
    source: str | Path | dict[str, Any],
    overrides: list[str] | None,
    population: int | None,
    interval: int | str | None,
    quantile: float | None,
    resample_probability: float | None,
    factors: Sequence[float] | str | None,
    *,
    metric: str,
    parallel: int,
    trial_settings: dict[str, Any],
) -> SearchPlan:
    """A PBT search (`rlrun.search.population.plan_pbt`), PBT's settings not given at
    `pbt.Options`' defaults."""
    extra = [option for option, value in trial_settings.items() if value is not None]
    if extra:
        raise BadInput(
            f"{', '.join(extra)} belong to a search of trials; --scheduler pbt trains its population"
            " generation by generation: drop them"
        )
    if population is None or interval is None:
        raise BadInput("--scheduler pbt needs --population N and --interval FRAMES, e.g. --population 8 --interval 50k")
    from rlrun.search.population import plan_pbt
    from rlrun.sizes import parse_size

    given: dict[str, Any] = {
        "interval": parse_size(interval, what="--interval"),
        "quantile": quantile,
        "resample_probability": resample_probability,
        "factors": None if factors is None else _factors(factors),
    }
    options = pbt.Options(population=population, **{key: value for key, value in given.items() if value is not None})
    return plan_pbt(source, overrides, options=options, metric=metric, parallel=parallel)


def _factors(factors: Sequence[float] | str) -> tuple[float, ...]:
    """PBT's factors, as numbers or as their text (`0.8,1.2`, as the command line takes them)."""
    if not isinstance(factors, str):
        return tuple(factors)
    try:
        return tuple(float(part) for part in factors.split(","))
    except ValueError:
        raise BadInput(f"--factors {factors!r}: give numbers separated by commas, e.g. 0.8,1.2") from None


def _plan_trials(
    source: str | Path | dict[str, Any],
    overrides: list[str] | None,
    *,
    trials: int | None,
    metric: str,
    sampler: str | None,
    pruner: str,
    parallel: int,
    prune_after: int,
) -> SearchPlan:
    """A search of trials suggested by Optuna."""
    document = source if isinstance(source, dict) else read_document(source)
    base_document, block = search_space.split(apply_overrides(document, overrides or []))
    if block is None:
        raise BadInput(
            f"spec {_label(source)} has no search block; add one, e.g. "
            f'"search": {{"agent.optimizer.lr": {search_space.EXAMPLE}}}, or train it with `rlrun train`'
        )
    spec = validate_spec(base_document)
    dimensions = search_space.parse(block, spec.to_json())
    grid = search_space.is_grid(dimensions)
    chosen_sampler = sampler or ("grid" if grid else "tpe")
    _check_choice("--metric", metric, METRICS)
    _check_choice("--sampler", chosen_sampler, SAMPLERS)
    _check_choice("--pruner", pruner, PRUNERS)
    if chosen_sampler == "grid" and not grid:
        ranges = ", ".join(d.path for d in dimensions if d.kind != "grid")
        raise BadInput(
            f"--sampler grid needs every dimension to be a grid; {ranges} is not: make it a grid or use --sampler tpe"
        )
    if chosen_sampler == "grid":
        size = search_space.grid_size(dimensions)
        if trials is not None and trials > size:
            raise BadInput(f"--trials {trials} is more than the grid's {size} points; give at most {size}")
        trials = trials or size
    if trials is None:
        raise BadInput("say how many trials to run: --trials N")
    if trials < 1 or parallel < 1:
        raise BadInput("--trials and --parallel take a count of at least 1")
    load_optuna()
    from rlrun.training import check_compatible

    check_compatible(spec)
    check_installed(spec.meta.track)
    settings = Settings(
        trials=trials,
        metric=metric,
        sampler=chosen_sampler,
        pruner=pruner,
        seed=spec.meta.seed,
        parallel=parallel,
        prune_after=prune_after,
    )
    return SearchPlan(spec, dimensions, settings, {d.path: d.to_json() for d in dimensions})


def _label(source: str | Path | dict[str, Any]) -> str:
    return "(a document)" if isinstance(source, dict) else str(source)


def _check_choice(option: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        from rlrun.spec import did_you_mean

        hint = did_you_mean(value, list(allowed)) or f" use one of {', '.join(allowed)}"
        raise BadInput(f"{option} {value!r} is not one of {', '.join(allowed)};{hint}")


def recorded_plan(record: SearchRecord) -> SearchPlan:
    """The search as it was recorded: its spec, space and settings, to continue it."""
    settings = _settings(record.settings_json)
    spec = recorded_spec(json.loads(record.spec_json))
    return SearchPlan(spec, search_space.load(record.space_json), settings, json.loads(record.space_json))


def _settings(settings_json: str) -> Settings:
    document = json.loads(settings_json)
    if document.get("scheduler") == "pbt":
        from rlrun.search.population import PbtSettings

        return PbtSettings.from_json(document)
    return Settings(**document)
