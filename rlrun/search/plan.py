"""Planning a search: its settings and its plan, everything checked before anything is written
(`plan_search`), and the plan of a recorded search, to continue it (`recorded_plan`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlrun.errors import BadInput
from rlrun.registry.records import SearchRecord
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


def plan_search(source: str | Path | dict[str, Any], overrides: list[str] | None = None, *,
                trials: int | None = None, metric: str = "eval_mean", sampler: str | None = None,
                pruner: str = "median", parallel: int = 1, prune_after: int = PRUNE_AFTER) -> SearchPlan:
    """The search a spec with a `search` block asks for; BadInput (or SpecError) when it cannot
    run, before anything is written or Optuna is imported."""
    document = source if isinstance(source, dict) else read_document(source)
    base_document, block = search_space.split(apply_overrides(document, overrides or []))
    if block is None:
        raise BadInput(f"spec {_label(source)} has no search block; add one, e.g. "
                       f'"search": {{"agent.optimizer.lr": {search_space.EXAMPLE}}}, or train it with `rlrun train`')
    spec = validate_spec(base_document)
    dimensions = search_space.parse(block, spec.to_json())
    grid = search_space.is_grid(dimensions)
    chosen_sampler = sampler or ("grid" if grid else "tpe")
    _check_choice("--metric", metric, METRICS)
    _check_choice("--sampler", chosen_sampler, SAMPLERS)
    _check_choice("--pruner", pruner, PRUNERS)
    if chosen_sampler == "grid" and not grid:
        ranges = ", ".join(d.path for d in dimensions if d.kind != "grid")
        raise BadInput(f"--sampler grid needs every dimension to be a grid; {ranges} is not: make it a grid or"
                       " use --sampler tpe")
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
    settings = Settings(trials=trials, metric=metric, sampler=chosen_sampler, pruner=pruner, seed=spec.meta.seed,
                        parallel=parallel, prune_after=prune_after)
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
