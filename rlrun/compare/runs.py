"""What a comparison reads: the runs its references name (runs, filters, a search's trials, a
population's members) and, per session, the evaluations that make its score. Read-only, standard
library and the registry only: no torch, gymnasium or rliable."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from rlrun import paths
from rlrun.catalog.targets import FoundRun, find_runs, lookup_search
from rlrun.errors import BadInput
from rlrun.refs import RunFilter, is_search_ref
from rlrun.registry import Registry, RunDetail, RunRecord

BY = ("spec", "algo", "name")
"""`--by`: what makes runs one group (spec name, algorithm, run name or id)."""
METRICS = ("final", "best", "auc")
"""`--metric`: a session's score from its evaluations: the last one, the best one, or their mean
(the area under its evaluation curve, per evaluation)."""


class SessionScores(NamedTuple):
    """One session (a seed) of one run on one env (a task): its evaluation means by frame."""

    run: RunRecord
    session: int
    seed: int
    frames: tuple[int, ...]
    means: tuple[float, ...]

    @property
    def env(self) -> str:
        return self.run.env_id

    def score(self, metric: str) -> float:
        """`final`: the last evaluation's mean return; `best`: the best; `auc`: their mean."""
        if metric == "final":
            return self.means[-1]
        if metric == "best":
            return max(self.means)
        return sum(self.means) / len(self.means)


class Found(NamedTuple):
    named: list[tuple[str, RunRecord]]  # each reference as given and each run it names, for messages
    runs: list[FoundRun]  # each run once, in the order first named


def find(references: Sequence[str], filters: RunFilter | None = None, *, home: Path | str | None = None) -> Found:
    """The runs `references` name, each once: a run reference as every command reads it, a
    `search:` reference as its trials' runs (a population's members: each member's newest segment)."""
    named: list[tuple[str, RunRecord]] = []
    runs: dict[str, FoundRun] = {}
    for reference in references:
        if is_search_ref(reference):
            for found in _search_runs(reference, home):
                named.append((reference, found.detail.run))
                runs.setdefault(found.detail.run.id, found)
            continue
        found_runs = find_runs([reference], filters, home=home, command="compare")
        named += found_runs.named
        for found in found_runs.runs:
            runs.setdefault(found.detail.run.id, found)
    return Found(named, list(runs.values()))


def _search_runs(reference: str, home: Path | str | None) -> list[FoundRun]:
    search = lookup_search(reference, home=home)
    if search.lineage:  # population-based training: each member's newest segment is the member
        newest: dict[int, int] = {}
        for line in sorted(search.lineage, key=lambda line: line.generation):
            newest[line.member] = line.trial_id
        trial_ids = set(newest.values())
        trials = [t for t in search.detail.trials if t.id in trial_ids]
    else:
        trials = list(search.detail.trials)
    run_ids = [t.run_id for t in trials if t.run_id is not None]
    if not run_ids:
        raise BadInput(f"{search.reference} has no trial runs yet; compare it once its trials have trained")
    root = paths.resolve_home(home)
    with Registry.open(root, create=False) as registry:
        return [FoundRun(registry.get_run(run_id), root) for run_id in run_ids]


def sessions(detail: RunDetail) -> list[SessionScores]:
    """Each session of the run with its training evaluations in frame order; a session that has
    none is bad input (there is nothing to score it by)."""
    scored = []
    for session in sorted(detail.sessions, key=lambda s: s.index):
        points = sorted(
            (e.frame, e.mean) for e in detail.evaluations if e.session_index == session.index and e.kind == "train"
        )
        if not points:
            run = detail.run
            raise BadInput(
                f"run {run.name or run.id} session s{session.index} has no evaluation recorded;"
                " train with meta.eval_frequency below its frames, or leave the run out"
            )
        frames, means = zip(*points, strict=True)
        scored.append(SessionScores(detail.run, session.index, session.seed, frames, means))
    return scored


def group_key(run: RunRecord, by: str) -> str:
    """The group a run belongs to under `--by`."""
    if by == "spec":
        return run.spec_name
    if by == "algo":  # a foreign run's algorithm is its library's (`sb3:ppo`), never rlrun's own
        return run.algorithm if run.origin is None else f"{run.origin}:{run.algorithm}"
    return run.name or run.id
