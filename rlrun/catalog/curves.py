"""What `rlrun plot` draws, computed here so a notebook can draw it its own way: each run's
evaluation return (or, with `metric`, a training metric) against frames, mean and std across its
sessions; or one search's trials. Read-only; `rlrun.cli.plot` only draws."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from rlrun import paths
from rlrun.catalog.export import gathered
from rlrun.catalog.targets import FoundRun, SearchLookup, find_runs, lookup_search
from rlrun.errors import BadInput
from rlrun.refs import RunFilter, is_search_ref
from rlrun.registry import Registry, RunDetail, RunRecord
from rlrun.registry.records import SearchDetail
from rlrun.session import metrics_log


@dataclass(frozen=True)
class Curve:
    """One run's training evaluations: at each frame, the mean and std across its sessions."""

    label: str
    frames: list[int]
    mean: list[float]
    std: list[float]
    sessions: int


@dataclass(frozen=True)
class MemberCurve:
    """A population-based training member's evaluations over its segments, in frame order, and
    each exploit: (frame, the score there of the member copied, that member)."""

    member: int
    frames: list[int]
    mean: list[float]
    exploits: list[tuple[int, float, int]]


class PopulationCurves(NamedTuple):
    reference: str  # as messages show it, `search:` included
    search: SearchDetail
    members: list[MemberCurve]


class RunCurves(NamedTuple):
    named: list[tuple[str, RunRecord]]  # each reference as given and the run it names
    curves: list[Curve]  # one per run, in the order first named


def default_image(drawn: RunCurves | SearchLookup | PopulationCurves, metric: str | None = None) -> Path:
    """Where `rlrun plot` without `-o` writes: a PNG in the current folder named after what it
    draws (`first.png`, `first-loss.png`, `bngx3k-and-2-more.png`, `search-sweep.png`). Run and
    search names are plain ASCII letters, digits and `_ . -`, so every name is a file name."""
    if isinstance(drawn, RunCurves):
        runs = [run.name or run.id for _, run in drawn.named]
        stem = runs[0] + (f"-and-{len(runs) - 1}-more" if len(runs) > 1 else "")
        stem += f"-{metric}" if metric else ""
    else:
        search = drawn.search.search if isinstance(drawn, PopulationCurves) else drawn.detail.search
        stem = f"search-{search.name or search.id}"
    return Path(f"{stem}.png")


def plot_data(
    references: Sequence[str] = ("latest",),
    filters: RunFilter | None = None,
    *,
    home: Path | str | None = None,
    metric: str | None = None,
) -> RunCurves | SearchLookup | PopulationCurves:
    """The curves of the runs `references` name, or the search one `search:` reference names
    (a search is drawn alone: score against trial, or a population's members against frames).
    An unknown `metric` is refused before anything is drawn, naming the closest logged one.

    Args:
        references: The runs, as `rlrun plot` takes them, or one `search:` reference alone.
        filters: Which runs the reference counts among (`RunFilter.of(status="finished")`); None: every run.
        home: The runs home: a folder or an object-store URL (None: $RLRUN_HOME, else ./runs).
        metric: A logged metric to draw against frames (`approx_kl`); None: the evaluation curve.

    Returns:
        `RunCurves` (one curve a run), a `SearchLookup` (score against trial) or
        `PopulationCurves` (a PBT population's members against frames).
    """
    if any(is_search_ref(reference) for reference in references):
        if len(references) != 1:
            raise BadInput("rlrun plot draws one search at a time (score against trial); name only it")
        found = lookup_search(references[0], home=home)
        return population_curves(found, home) if found.lineage else found
    runs = find_runs(references, filters, home=home, command="plot")
    if metric is None:
        return RunCurves(runs.named, [curve(found.detail) for found in runs.runs])
    return RunCurves(runs.named, _metric_curves(runs.runs, metric))


def population_curves(found: SearchLookup, home: Path | str | None) -> PopulationCurves:
    """Each member's curve: its segments' own evaluations (mean over sessions) one after another;
    where it copied another member, the curve jumps to that member's score at the frame copied
    and goes on from there."""
    by_run: dict[str, Curve] = {}
    trials = {t.id: t for t in found.detail.trials}
    with Registry.open(paths.resolve_home(home), create=False) as registry:
        for trial in found.detail.trials:
            if trial.run_id is not None:
                by_run[trial.run_id] = curve(registry.get_run(trial.run_id))
    members: dict[int, MemberCurve] = {}
    for line in sorted(found.lineage, key=lambda line: (line.generation, line.member)):
        member = members.setdefault(line.member, MemberCurve(line.member, [], [], []))
        run_id = trials[line.trial_id].run_id
        segment = by_run.get(run_id) if run_id is not None else None
        if line.parent_member is not None and line.parent_member != line.member:
            copied = members.get(line.parent_member)
            at = copied.mean[copied.frames.index(line.frame)] if copied and line.frame in copied.frames else math.nan
            member.exploits.append((line.frame, at, line.parent_member))
            if math.isfinite(at):  # the curve jumps to the copied member's score, and goes on from there
                member.frames.append(line.frame)
                member.mean.append(at)
        if segment is not None:
            member.frames.extend(segment.frames)
            member.mean.extend(segment.mean)
    return PopulationCurves(found.reference, found.detail, [members[m] for m in sorted(members)])


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
    points = [
        (int(f), float(v))
        for f, v in zip(table["frame"], table.get(metric, []), strict=False)
        if f is not None and v is not None and math.isfinite(v)
    ]
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
