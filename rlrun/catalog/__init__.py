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

from rlrun.catalog.curves import Curve, RunCurves, curve, metric_curve, plot_data
from rlrun.catalog.export import MetricsTable, export_metrics
from rlrun.catalog.listing import RunListing, list_runs, list_searches
from rlrun.catalog.targets import FoundRun, FoundRuns, RunLookup, SearchLookup, find_runs, lookup, lookup_search

__all__ = [
    "Curve", "FoundRun", "FoundRuns", "MetricsTable", "RunCurves", "RunListing", "RunLookup", "SearchLookup", "curve",
    "export_metrics", "find_runs", "list_runs", "list_searches", "lookup", "lookup_search", "metric_curve", "plot_data",
]  # fmt: skip
