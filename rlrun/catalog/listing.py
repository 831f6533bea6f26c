"""`rlrun ls`: which runs a listing shows (filters, sort order, one page or all) and the counts
its messages need, counted only when they are needed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from rlrun import paths
from rlrun.refs import RunFilter
from rlrun.registry import Registry, RunSummary
from rlrun.registry.records import SearchRecord
from rlrun.sizes import parse_size


class RunListing(NamedTuple):
    runs: list[RunSummary]  # the page, in `filters.sort` order; `row` numbers as references read them
    total: int  # runs that pass the filters (beyond the page too)
    everything: int  # runs in the home, filtered or not (counted apart only when none passed)
    filters: RunFilter
    home: Path
    hidden_trials: int = 0  # trial runs of the page left out (`trials=False`)


def list_runs(
    filters: RunFilter | None = None, *, home: Path | str | None = None, limit: int | None = 20, trials: bool = True
) -> RunListing:
    """The runs that pass `filters`, newest first unless `filters.sort` says otherwise; at most
    `limit` of them (None: every one). Read-only; a home without a registry lists nothing.

    `trials=False` leaves out the runs that train a search's trials (a search of 30 trials would
    fill the page) and counts them instead. The others keep their row numbers, so a row is the
    same run with or without its neighbours: `rlrun show 12` names the run ls numbered 12.

    Args:
        filters: Which runs to list and in what order (`RunFilter.of(algorithm="ppo", sort="best")`);
            None: every run, newest first.
        home: The runs home: a folder or an object-store URL (None: $RLRUN_HOME, else ./runs).
        limit: The most runs to list; None: every one.
        trials: Whether to list the runs that train a search's trials.

    Returns:
        The page of runs (`runs`, each with its `row`) and the counts (`total`, `everything`).
    """
    chosen = filters or RunFilter()
    root = paths.resolve_home(home)
    with Registry.open(root, create=False) as registry:
        runs = registry.list_runs(filters=chosen, limit=limit)
        hidden = set() if trials or not runs else registry.trial_runs([run.id for run in runs])
        # A count is a second query on a large registry: only when the page may not hold them all.
        total = registry.count_runs(chosen) if limit is not None and len(runs) == limit else len(runs)
        # "no runs match --algo x (12 runs in ...)" tells a filter that is wrong from an empty home.
        everything = registry.count_runs() if not runs and chosen.narrows else total
        shown = _with_phases(registry, [run for run in runs if run.id not in hidden])
    return RunListing(shown, total, everything, chosen, root, len(runs) - len(shown))


def _with_phases(registry: Registry, runs: list[RunSummary]) -> list[RunSummary]:
    """The runs, those that learn from a dataset with their `offline_updates` (so `phase` reads):
    one query for their newest specs, none when the page holds no such run."""
    from rlrun.spec.agents import ALGORITHMS, config_class

    # the algorithms on the page only: one small schema module each, not the whole table
    takers = {name for name in {run.algorithm for run in runs} if name in ALGORITHMS and config_class(name).TAKES_DATA}
    learners = [run.id for run in runs if run.algorithm in takers]
    if not learners:
        return runs
    updates = {
        run_id: parse_size((json.loads(spec).get("meta") or {}).get("offline_updates") or 0)
        for run_id, spec in registry.latest_specs(learners).items()
    }
    return [run._replace(offline_updates=updates.get(run.id, 0)) for run in runs]


def list_searches(
    *, home: Path | str | None = None, limit: int | None = 20
) -> list[tuple[SearchRecord, int, float | None]]:
    """Searches newest first, at most `limit` (None: all), each with its count of ended trials and
    its best value. Read-only.

    Args:
        home: The runs home: a folder or an object-store URL (None: $RLRUN_HOME, else ./runs).
        limit: The most searches to list; None: every one.

    Returns:
        (search, ended trials, best value or None) for each search.
    """
    with Registry.open(paths.resolve_home(home), create=False) as registry:
        return registry.list_searches(limit)
