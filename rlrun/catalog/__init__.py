"""The runs home read for people: what `rlrun ls`, `show`, `export` and `plot` decide, as library
calls that return records (a notebook gets what a command prints, before it is printed).

    listing  which runs (or searches) a listing shows, and how many there are in all
    targets  what a reference names, a run or a search (the `search:` namespace), read once
    export   the training metrics of several runs as one table of columns
    curves   what `rlrun plot` draws: evaluation or metric curves, or a search's trials

Read-only, every call: nothing here writes a row or a file. Standard library and the registry
only (no torch, gymnasium, SQLAlchemy on SQLite, or matplotlib), so the registry commands stay
instant. A room of its own because it reads both the home's folders (`rlrun.home`: runs read in
place) and the sessions' metrics logs (`rlrun.session.metrics_log`), two rooms on one layer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlrun.catalog.curves import (
        Curve,
        PopulationCurves,
        RunCurves,
        curve,
        default_image,
        metric_curve,
        plot_data,
    )
    from rlrun.catalog.export import MetricsTable, export_metrics
    from rlrun.catalog.listing import RunListing, list_runs, list_searches
    from rlrun.catalog.targets import (
        FoundRun,
        FoundRuns,
        RunLookup,
        SearchLookup,
        TrackerReport,
        find_runs,
        lookup,
        lookup_search,
    )

# Each name from its module, loaded on first use: `rlrun ls` loads the listing alone, not the
# metrics log's CSV reader or the run-folder reader that `plot` and `show` need.
_MODULES = {
    "curves": ("Curve", "PopulationCurves", "RunCurves", "curve", "default_image", "metric_curve", "plot_data"),
    "export": ("MetricsTable", "export_metrics"),
    "listing": ("RunListing", "list_runs", "list_searches"),
    "targets": (
        "FoundRun",
        "FoundRuns",
        "RunLookup",
        "SearchLookup",
        "TrackerReport",
        "find_runs",
        "lookup",
        "lookup_search",
    ),
}
_LAZY = {name: module for module, names in _MODULES.items() for name in names}
__all__ = [
    "Curve",
    "FoundRun",
    "FoundRuns",
    "MetricsTable",
    "PopulationCurves",
    "RunCurves",
    "RunListing",
    "RunLookup",
    "SearchLookup",
    "TrackerReport",
    "curve",
    "default_image",
    "export_metrics",
    "find_runs",
    "list_runs",
    "list_searches",
    "lookup",
    "lookup_search",
    "metric_curve",
    "plot_data",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"rlrun.catalog.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'rlrun.catalog' has no attribute {name!r}")
