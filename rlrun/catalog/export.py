"""`rlrun export --metrics`: several runs' training metrics as one table of columns (`run`,
`session`, then every logged column), each run once. Read-only."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from rlrun.catalog.targets import FoundRun, find_runs
from rlrun.imports.foreign import refuse_foreign
from rlrun.registry import RunRecord
from rlrun.session import metrics_log


class MetricsTable(NamedTuple):
    named: list[tuple[str, RunRecord]]  # each reference as given and the run it names
    table: dict[str, list[Any]]  # columns, ready for `pandas.DataFrame(...)` or `metrics_log.to_csv`


def export_metrics(references: Sequence[str] = ("latest",), *, home: Path | str | None = None) -> MetricsTable:
    """Every session's metrics log of the runs `references` name, gathered into one table.

    Args:
        references: The runs, each as `rlrun export --metrics` takes it (latest, a row, an id, a name).
        home: The runs home: a folder or an object-store URL (None: $RLRUN_HOME, else ./runs).

    Returns:
        Each reference with the run it names, and the columns (`table`).
    """
    found = find_runs(references, home=home, command="export")
    for run in found.runs:
        refuse_foreign(run.detail.run, "export")
    return MetricsTable(found.named, gathered(found.runs))


def gathered(runs: Iterable[FoundRun]) -> dict[str, list[Any]]:
    """The metrics logs of these runs' sessions as one table (see `metrics_log.gather`)."""
    return metrics_log.gather(log for found in runs for log in metrics_log.session_logs(found.home, found.detail))
