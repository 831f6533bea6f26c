"""`rlrun compare` as a library call: group the runs, make each group's score matrix (sessions are
seeds, envs are tasks), and ask rliable (`rlrun.compare.statistics`) for the aggregates, the
probabilities of improvement and, for a gate, the verdict. Read-only: the registry and the run
folders, nothing written."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlrun.compare import identity, normalize, runs, statistics
from rlrun.compare.runs import BY, METRICS, SessionScores
from rlrun.compare.statistics import Estimate
from rlrun.errors import BadInput
from rlrun.refs import RunFilter
from rlrun.registry import RunRecord

DEFAULT_REPS = 2_000
"""Bootstrap repetitions by default: rliable's default for its performance profiles
(`create_performance_profile(reps=2000)`) and the RL Zoo's for its intervals, so that a first look
takes seconds. `PAPER_REPS` (`--reps 50000`) is rliable's default for `get_interval_estimates`, the
figure its paper reports."""
PAPER_REPS = 50_000
DEFAULT_SEED = 0
VERDICTS = ("identical", "improved", "regressed", "inconclusive")
BASELINE = "baseline"
NO_GAP_NOTE = (
    "no optimality gap under --normalize none: it measures how far scores fall short of 1, which raw"
    " returns have no meaning for; add --normalize minmax (or human for Atari) to see it"
)


@dataclass(frozen=True)
class Group:
    """One group's runs and, per task (env, in the comparison's task order), its sessions' scores."""

    name: str
    runs: list[RunRecord]
    sessions: dict[str, list[SessionScores]]  # env id -> its sessions, in run then session order

    @property
    def seeds(self) -> int:
        return min(len(scored) for scored in self.sessions.values())


@dataclass(frozen=True)
class GroupResult:
    name: str
    runs: list[str]
    seeds: int
    estimates: dict[str, Estimate]  # median, iqm, mean, optimality_gap (not under --normalize none)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "runs": self.runs, "seeds": self.seeds}
        for metric in ("iqm", "median", "mean", "optimality_gap"):  # none: identical; no gap: raw returns
            if metric not in self.estimates:
                continue
            estimate = self.estimates[metric]
            data[metric], data[f"{metric}_ci"] = estimate.point, [estimate.low, estimate.high]
        return data


@dataclass(frozen=True)
class Improvement:
    """P(a > b): the probability that a run of group `a` scores above one of group `b` on a task."""

    a: str
    b: str
    estimate: Estimate

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "probability": self.estimate.point,
            "ci": [self.estimate.low, self.estimate.high],
        }


@dataclass(frozen=True)
class Comparison:
    groups: list[GroupResult]
    improvement: list[Improvement]
    tasks: list[str]
    metric: str
    normalize: str
    reps: int
    seed: int
    verdict: str | None = None
    notes: list[str] = field(default_factory=list)  # a task left raw, and why
    named: list[tuple[str, RunRecord]] = field(default_factory=list, repr=False)  # each reference and its runs
    scores: dict[str, np.ndarray] = field(default_factory=dict, repr=False)  # group -> seeds x tasks
    """group -> its score matrix as handed to rliable: seeds x tasks, normalised."""
    curves: dict[str, tuple[list[int], np.ndarray]] = field(default_factory=dict, repr=False)
    """group -> (the evaluation frames all its sessions share, scores seeds x tasks x frames)."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "groups": [g.to_json() for g in self.groups],
            "improvement": [i.to_json() for i in self.improvement],
        }
        if self.verdict is not None:
            data["verdict"] = self.verdict
        data.update(
            tasks=self.tasks,
            metric=self.metric,
            normalize=self.normalize,
            reps=self.reps,
            seed=self.seed,
            notes=self.notes,
        )
        return data


def compare(
    references: Sequence[str],
    filters: RunFilter | None = None,
    *,
    by: str = "spec",
    metric: str = "final",
    normalize_by: str = "none",
    reps: int = DEFAULT_REPS,
    seed: int = DEFAULT_SEED,
    baseline: Sequence[str] = (),
    home: Path | str | None = None,
    allow_running: bool = True,
    progress: Callable[[int], statistics.Tick] | None = None,
) -> Comparison:
    """Compare the runs `references` name, grouped `by` spec, algorithm or name; with `baseline`,
    the runs it names are one group (`baseline`) and all the others another (`new`), and the
    comparison carries a verdict: identical (bit for bit), improved, regressed or inconclusive.

    A run still running is scored on its evaluations so far, with a note saying so; with
    `allow_running=False` (what `--gate` asks unless `--allow-running`) it is bad input instead.
    `progress(total)`, when given, is called once the bootstrap is about to start with the number
    of statistic evaluations it will make, and returns what to call after each one."""
    check_options(by, metric, normalize_by, reps)
    found = runs.find(references, filters, home=home)
    old = runs.find(baseline, filters, home=home) if baseline else None
    still = still_running([*found.runs, *(old.runs if old is not None else [])])
    if still and not allow_running:
        raise BadInput(
            f"{still[0]} is still running: the gate would judge it on part of its training; wait for it"
            " to end (rlrun ls), stop it, or add --allow-running to judge its evaluations so far"
        )
    why_not = None  # why bit-equal runs are not identical (their software)
    if old is not None:
        mine = {f.detail.run.id for f in found.runs}
        shared = [f.detail.run for f in old.runs if f.detail.run.id in mine]
        if shared:
            raise BadInput(
                f"run {shared[0].name or shared[0].id} is both compared and the baseline; name it on one side only"
            )
        groups = [_group("new", found.runs), _group(BASELINE, old.runs)]
        same, why_not = identity.judge(found.runs, old.runs)
        if same:
            notes = [f"{run} is still running" for run in still]
            return _identical(groups, metric, normalize_by, reps, seed, found.named + old.named, notes)
    else:
        groups = [
            _group(name, [f for f in found.runs if runs.group_key(f.detail.run, by) == name])
            for name in dict.fromkeys(runs.group_key(f.detail.run, by) for f in found.runs)
        ]
        if len(groups) < 2:
            raise BadInput(
                f"all the runs named are one group ({groups[0].name}) under --by {by}; name runs of"
                " another group too, group them by another --by, or give a --baseline"
            )
    tasks = _check_tasks(groups, normalize_by)
    for group in groups:
        _check_seeds(group)
    notes = [f"{run} is still running: its scores are its evaluations so far" for run in still]
    notes += [why_not] if why_not else []
    notes += [
        normalize.missing_reason(task, normalize_by)
        for task in tasks
        if normalize_by != "none" and normalize.scale(task, normalize_by) is None
    ]
    if normalize_by == "none":
        notes.append(NO_GAP_NOTE)
    scores = {g.name: _matrix(g, tasks, metric, normalize_by) for g in groups}
    pairs = _pairs([g.name for g in groups], baseline=bool(baseline))
    tick = progress(statistics.calls(reps) * (len(groups) + len(pairs))) if progress is not None else None
    estimates = statistics.aggregates(scores, reps=reps, seed=seed, tick=tick)
    probabilities = statistics.improvements(
        {f"{a},{b}": (scores[a], scores[b]) for a, b in pairs}, reps=reps, seed=seed, tick=tick
    )
    improvement = [Improvement(a, b, probabilities[f"{a},{b}"]) for a, b in pairs]
    if normalize_by == "none":  # computed with the others (the same resamples), reported nowhere
        estimates = {name: {k: e for k, e in by.items() if k != "optimality_gap"} for name, by in estimates.items()}
    results = [GroupResult(g.name, [r.name or r.id for r in g.runs], g.seeds, estimates[g.name]) for g in groups]
    verdict = verdict_of(improvement[0].estimate) if baseline else None
    curves = {g.name: _curve(g, tasks, normalize_by) for g in groups}
    named = found.named + (old.named if old is not None else [])
    return Comparison(
        results, improvement, tasks, metric, normalize_by, reps, seed, verdict, notes, named, scores, curves
    )


def verdict_of(estimate: Estimate) -> str:
    """improved when the whole interval of P(new > baseline) lies above one half, regressed when
    below, inconclusive when it holds one half."""
    if estimate.low > 0.5:
        return "improved"
    if estimate.high < 0.5:
        return "regressed"
    return "inconclusive"


def check_options(by: str, metric: str, normalize_by: str, reps: int) -> None:
    for option, value, choices in (
        ("--by", by, BY),
        ("--metric", metric, METRICS),
        ("--normalize", normalize_by, normalize.NORMALIZATIONS),
    ):
        if value not in choices:
            raise BadInput(f"{option} {value!r} is not one of {', '.join(choices)}")
    if reps < 1:
        raise BadInput(
            f"--reps {reps} must be at least 1 ({DEFAULT_REPS:,} by default; {PAPER_REPS:,}, rliable's"
            " default for intervals, for a paper)"
        )


def still_running(found: Sequence[Any]) -> list[str]:
    """Each run (as `run NAME`) that is still running, with the frames its sessions have reached."""
    from rlrun.sizes import format_size

    said = []
    for item in found:
        run = item.detail.run
        if run.status != "running":
            continue
        frames = sorted({s.frame for s in item.detail.sessions})
        at = format_size(frames[0]) if len(frames) == 1 else f"{format_size(frames[0])}-{format_size(frames[-1])}"
        said.append(f"run {run.name or run.id} (at frame {at} of {format_size(run.max_frame)})")
    return said


def _group(name: str, found: Sequence[Any]) -> Group:
    by_task: dict[str, list[SessionScores]] = {}
    for item in found:
        for scored in runs.sessions(item.detail):
            by_task.setdefault(scored.env, []).append(scored)
    return Group(name, [item.detail.run for item in found], by_task)


def _identical(
    groups: list[Group],
    metric: str,
    normalize_by: str,
    reps: int,
    seed: int,
    named: list[tuple[str, RunRecord]],
    notes: list[str],
) -> Comparison:
    """Bit-identical runs: no statistics to compute; each group's numbers are its scores' own."""
    results = [GroupResult(g.name, [r.name or r.id for r in g.runs], g.seeds if g.sessions else 0, {}) for g in groups]
    return Comparison(
        results,
        [],
        sorted({t for g in groups for t in g.sessions}),
        metric,
        normalize_by,
        reps,
        seed,
        "identical",
        notes,
        named,
    )


def _check_tasks(groups: list[Group], normalize_by: str) -> list[str]:
    """The tasks (envs), the same for every group; several envs only on a common scale."""
    tasks = list(dict.fromkeys(t for g in groups for t in g.sessions))
    if len(tasks) > 1 and normalize_by == "none":
        raise BadInput(
            f"the runs span envs {', '.join(tasks)} whose raw returns are on different scales;"
            " add --normalize minmax (or human for Atari), or narrow with --env"
        )
    for group in groups:
        missing = [t for t in tasks if t not in group.sessions]
        if missing:
            raise BadInput(
                f"group {group.name} has no runs on {', '.join(missing)} while others do; compare runs of"
                " the same envs in every group, or narrow with --env"
            )
    return tasks


def _check_seeds(group: Group) -> None:
    for task, scored in group.sessions.items():
        if len(scored) < 2:
            raise BadInput(
                f"group {group.name} has {len(scored)} seed on {task}; confidence intervals need two at"
                " least: train it with --sessions 3, or add runs of it"
            )
    counts = {task: len(scored) for task, scored in group.sessions.items()}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{n} on {task}" for task, n in counts.items())
        raise BadInput(
            f"group {group.name} has different numbers of seeds per env ({listed}); give every env the"
            " same number of sessions"
        )


def _scaled(values: np.ndarray, task: str, normalize_by: str) -> np.ndarray:
    scale = normalize.scale(task, normalize_by)
    return values if scale is None else (values - scale.low) / (scale.high - scale.low)


def _matrix(group: Group, tasks: list[str], metric: str, normalize_by: str) -> np.ndarray:
    """seeds x tasks: column t holds task t's sessions' scores, in run then session order."""
    columns = [
        _scaled(np.array([s.score(metric) for s in group.sessions[t]], dtype=np.float64), t, normalize_by)
        for t in tasks
    ]
    return np.stack(columns, axis=1)


def _curve(group: Group, tasks: list[str], normalize_by: str) -> tuple[list[int], np.ndarray]:
    """seeds x tasks x frames over the evaluation frames every session of the group shares."""
    shared = set.intersection(*(set(s.frames) for t in tasks for s in group.sessions[t]))
    frames = sorted(shared)
    cube = np.empty((group.seeds, len(tasks), len(frames)))
    for j, task in enumerate(tasks):
        for i, scored in enumerate(group.sessions[task]):
            by_frame = dict(zip(scored.frames, scored.means, strict=True))
            cube[i, j] = _scaled(np.array([by_frame[f] for f in frames], dtype=np.float64), task, normalize_by)
    return frames, cube


def _pairs(names: list[str], *, baseline: bool) -> list[tuple[str, str]]:
    """Which probabilities of improvement to report: new over the baseline; otherwise each pair of
    groups once, in the order named (as the RL Zoo does): P(b > a) is 1 - P(a > b), and each pair
    costs a bootstrap of one Mann-Whitney U per task and repetition, the slowest part of a comparison."""
    if baseline:
        return [("new", BASELINE)]
    return list(itertools.combinations(names, 2))
