"""Planning a search of trials suggested by Optuna (`plan_trials`), everything checked before
anything is written: the scheduler "trials" of `rlrun.search.plan`, and the base of a PBT search's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlrun.errors import BadInput
from rlrun.search import space as search_space
from rlrun.search.optuna_adapter import load_optuna
from rlrun.search.settings import METRICS, PRUNE_AFTER, PRUNERS, SAMPLERS, SearchPlan, Settings
from rlrun.spec import apply_overrides, read_document, validate_spec
from rlrun.trackers import check_installed


def plan_trials(
    source: str | Path | dict[str, Any],
    overrides: list[str] | None,
    *,
    metric: str,
    parallel: int,
    trials: int | None = None,
    sampler: str | None = None,
    pruner: str | None = None,
    prune_after: int | None = None,
) -> SearchPlan:
    """A search of `trials` trials suggested by Optuna (for an all-grid space, its grid's size when
    not given), a setting left None at its default: sampler tpe (grid for an all-grid space),
    pruner median after PRUNE_AFTER trials."""
    pruner = "median" if pruner is None else pruner
    prune_after = PRUNE_AFTER if prune_after is None else prune_after
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
