"""Hyper-parameter search: `run_search` and `resume_search`, the library calls behind
`rlrun search` and `rlrun resume search:...`.

A search suggests trials with Optuna over a spec's search space (`rlrun.search.space`) and trains
each as an ordinary run through the training API (`rlrun.training`): its score is the mean over
the run's sessions of an evaluation statistic, and a pruner stops a poor trial early on its
evaluation curve (the stopped run keeps its snapshot: `rlrun resume` can continue it).

The registry, not Optuna, holds the search (`searches` and `trials`: the runs, their parameters,
their scores at each evaluation, their end). Each suggestion is made by a fresh in-memory Optuna
study that is told every ended trial, with a sampler seeded from the spec's seed and the trial's
number: a pure function of what came before. A long-lived seeded sampler would not do: its random
generator advances with every suggestion, so a resumed driver, replaying the same trials into a
new sampler, would suggest something else. So a search killed at any moment and resumed
(`rlrun resume search:REF`) suggests the same trials, and each interrupted trial continues from its
run's snapshots exactly (`rlrun.training.resume`): with one trial at a time, the resumed search is
the uninterrupted one, trial for trial.

The package, by idea: `plan` (the table of schedulers: each one's settings, planner, recorded
settings and driver), `settings` (a search's settings and plan, as data), `trials_plan` (a search
of trials, checked before anything is written), `calls`
(`run_search`, `resume_search`, `drive_search`), `driver` (the search's records, heartbeat and
signals around its trials), `trial` (one trial: suggested, trained as a run, scored, pruned),
`optuna_adapter` (Optuna behind one door), `outcomes` (what a search reports); `space` (the search
block), `population` and `pbt` (population-based training), `heartbeat` and `detached`.
"""

from __future__ import annotations

from rlrun.search.calls import HandOver, drive_search, resume_search, run_search
from rlrun.search.optuna_adapter import importance
from rlrun.search.outcomes import SearchResult, TrialOutcome
from rlrun.search.plan import plan_search
from rlrun.search.settings import METRICS, PRUNERS, SAMPLERS, SearchPlan, Settings

__all__ = [
    "METRICS",
    "PRUNERS",
    "SAMPLERS",
    "HandOver",
    "SearchPlan",
    "SearchResult",
    "Settings",
    "TrialOutcome",
    "drive_search",
    "importance",
    "plan_search",
    "resume_search",
    "run_search",
]
