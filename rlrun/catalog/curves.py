"""What `rlrun plot` draws, computed here so a notebook can draw it its own way: each run's
evaluation return (or, with `metric`, a training metric) against frames, mean and std across its
sessions; or one search's trials. Read-only; `rlrun.cli.plot` only draws."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from rlrun.catalog.export import gathered
from rlrun.catalog.targets import FoundRun, SearchLookup, find_runs, lookup_search
from rlrun.errors import BadInput
from rlrun.refs import RunFilter, is_search_ref
from rlrun.registry import RunDetail, RunRecord
from rlrun.session import metrics_log


@dataclass(frozen=True)
class Curve:
    """One run's training evaluations: at each frame, the mean and std across its sessions."""

    label: str
    frames: list[int]
    mean: list[float]
    std: list[float]
    sessions: int


class RunCurves(NamedTuple):
    named: list[tuple[str, RunRecord]]  # each reference as given and the run it names
    curves: list[Curve]  # one per run, in the order first named


def plot_data(references: Sequence[str] = ("latest",), filters: RunFilter | None = None, *,
              home: Path | str | None = None, metric: str | None = None) -> RunCurves | SearchLookup:  # fmt: skip
    """The curves of the runs `references` name, or the search one `search:` reference names
    (a search is drawn alone: score against trial). An unknown `metric` is refused before
    anything is drawn, naming the closest logged one."""
    if any(is_search_ref(reference) for reference in references):
        if len(references) != 1:
            raise BadInput("rlrun plot draws one search at a time (score against trial); name only it")
        return lookup_search(references[0], home=home)
    runs = find_runs(references, filters, home=home, command="plot")
    if metric is None:
        return RunCurves(runs.named, [curve(found.detail) for found in runs.runs])
    return RunCurves(runs.named, _metric_curves(runs.runs, metric))


def _metric_curves(runs: list[FoundRun], metric: str) -> list[Curve]:
    tables = [gathered([found]) for found in runs]
    problem = metrics_log.unknown_metric(metric, [name for table in tables for name in table])
    if problem:
        raise BadInput(problem)
    return [metric_curve(found.detail, table, metric) for found, table in zip(runs, tables, strict=True)]


def curve(detail: RunDetail) -> Curve:
    """Average the sessions' evaluation means frame by frame (a frame where only some sessions
    have evaluated averages those)."""
    return _across_sessions(detail, [(e.frame, e.mean) for e in detail.evaluations if e.kind == "train"])


def metric_curve(detail: RunDetail, table: dict[str, list[Any]], metric: str) -> Curve:
    """One logged scalar of the run's sessions (`table`: their gathered metrics logs), averaged
    frame by frame as `curve` does; empty cells are skipped."""
    points = [(int(f), float(v)) for f, v in zip(table["frame"], table.get(metric, []), strict=False)
              if f is not None and v is not None and math.isfinite(v)]
    return _across_sessions(detail, points)


def _across_sessions(detail: RunDetail, points: list[tuple[int, float]]) -> Curve:
    by_frame: dict[int, list[float]] = {}
    for frame, value in points:
        by_frame.setdefault(frame, []).append(value)
    frames = sorted(by_frame)
    means = [sum(by_frame[f]) / len(by_frame[f]) for f in frames]
    stds = [_std(by_frame[f]) for f in frames]
    run = detail.run
    label = f"{run.name or run.id} ({run.algorithm}, {run.env_id}, {run.num_sessions} session"
    label += "s)" if run.num_sessions != 1 else ")"
    return Curve(label, frames, means, stds, run.num_sessions)


def _std(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
