"""A search's settings and its plan, as data: what every part of a search reads (the driver, a
trial, the Optuna adapter, each scheduler's planner), below all of them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from rlrun.search.space import Dimension
from rlrun.spec import Spec

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
