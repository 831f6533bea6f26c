"""What a reference names, read once: a run (its detail, where its folder is read, the checkpoint
an `@` suffix picks) or a search (the `search:` namespace, decided by `rlrun.refs.parse_target`),
so no command tells the two apart itself. A run folder outside the runs home is read where it is
(`rlrun.home.folders`). Read-only."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

from rlrun import paths
from rlrun.errors import BadInput
from rlrun.home.folders import open_registry
from rlrun.refs import RunFilter, SearchRef, parse_target, search_target, whole_run
from rlrun.registry import CheckpointChoice, Registry, RunDetail, RunRecord, choose_checkpoint
from rlrun.registry.records import LineageRecord, SearchDetail
from rlrun.registry.resolve import run_address
from rlrun.trackers import status


class TrackerReport(NamedTuple):
    """What one tracker got of one session (its `trackers.json`, `rlrun.trackers.status`)."""

    session: int
    delivered: status.Delivered

    def to_json(self) -> dict[str, Any]:
        return {"session": self.session, **self.delivered.to_json()}


class RunLookup(NamedTuple):
    reference: str  # as given
    run: RunRecord  # its status as reported
    detail: RunDetail
    home: Path  # where its folder is read: the home it lives in, or the parent of a folder read in place
    checkpoint: CheckpointChoice | None  # the one an `@` suffix names; None without one
    trackers: tuple[TrackerReport, ...] = ()  # per session, per tracker: what it got (none: no trackers)
    where: str | None = None  # its folder as messages name it, when it lives in another home than the one given

    def to_json(self) -> dict[str, Any]:
        """`rlrun show --json`: the run's records, and what its trackers got."""
        return {**self.detail.to_json(), "trackers": [report.to_json() for report in self.trackers]}


class SearchLookup(NamedTuple):
    reference: str  # as messages show it, `search:` included
    detail: SearchDetail
    lineage: tuple[LineageRecord, ...] = ()  # a population-based training search's segments; none otherwise


def lookup(
    reference: str = "latest", filters: RunFilter | None = None, *, home: Path | str | None = None
) -> RunLookup | SearchLookup:
    """The run or the search (`search:...`) `reference` names. The filters narrow runs only: a
    search reference names one search whatever they say.

    Args:
        reference: A run (latest, latest~N, a row, an id, prefix or name, a run folder; `@best`,
            `@latest` or `@FRAME` for a checkpoint) or a search (`search:latest`, `search:ID`).
        filters: Which runs the reference counts among (`RunFilter.of(status="finished")`); None: every run.
        home: The runs home: a folder or an object-store URL (None: $RLRUN_HOME, else ./runs).

    Returns:
        A `RunLookup` (the run, its detail, the checkpoint named) or a `SearchLookup`.

    Raises:
        RunReferenceError: The reference is unknown, ambiguous or out of range.
    """
    target = parse_target(reference)
    if isinstance(target, SearchRef):
        return _search(target, home)
    with open_registry(target, home) as registry:
        run = registry.resolve(target, filters, anywhere=True)
        detail = registry.get_run(run.id)
        root = _readable_home(registry, run)
        elsewhere = registry.elsewhere(run)
    chosen = choose_checkpoint(detail, target) if target.checkpoint is not None else None
    where = None if elsewhere is None else run_address(elsewhere, run.id)
    return RunLookup(reference, run, detail, root, chosen, _tracker_reports(root, detail), where)


def _readable_home(registry: Registry, run: RunRecord) -> Path:
    """Where `show` reads the run's files: the home it lives in (`Registry.home_of`); the registry's
    own when that home cannot be opened here (its folders are on another machine, its store's
    library is not installed): the registry's records are shown all the same."""
    try:
        return registry.home_of(run)
    except BadInput:
        return registry.home


def _tracker_reports(home: Path, detail: RunDetail) -> tuple[TrackerReport, ...]:
    """What each session's trackers got, as its session closed them last (or `rlrun track` sent)."""
    return tuple(
        TrackerReport(session.index, delivered)
        for session in detail.sessions
        for delivered in status.read(paths.session_dir(home, detail.run.id, session.index)).values()
    )


def lookup_search(reference: str = "search:latest", *, home: Path | str | None = None) -> SearchLookup:
    """The search `reference` names, `search:` optional (`abc` is `search:abc`).

    Args:
        reference: `search:latest`, `search:ID` (or a prefix of it) or a search's name.
        home: The runs home: a folder or an object-store URL (None: $RLRUN_HOME, else ./runs).

    Returns:
        The search's detail (its trials) and, for population-based training, its lineage.
    """
    return _search(search_target(reference), home)


def _search(target: SearchRef, home: Path | str | None) -> SearchLookup:
    with Registry.open(paths.resolve_home(home), create=False) as registry:
        detail = registry.get_search(registry.resolve_search(target.ref).id)
        lineage = tuple(registry.get_lineage(detail.search.id))
    return SearchLookup(target.text, detail, lineage)


class FoundRun(NamedTuple):
    detail: RunDetail  # its run's status as reported
    home: Path  # where its folder is read (the home it lives in), as in RunLookup


class FoundRuns(NamedTuple):
    named: list[tuple[str, RunRecord]]  # each reference as given and the run it names, for messages
    runs: list[FoundRun]  # each run once, in the order first named


def find_runs(
    references: Iterable[str], filters: RunFilter | None = None, *, home: Path | str | None = None, command: str
) -> FoundRuns:
    """The whole runs `references` name: a session or checkpoint suffix is refused (`command`
    names the command in that message), a run folder outside the home is read where it is."""
    named: list[tuple[str, RunRecord]] = []
    runs: dict[str, FoundRun] = {}
    for reference in references:
        ref = whole_run(reference, command)
        with open_registry(ref, home) as registry:
            run = registry.resolve(ref, filters, anywhere=True)
            if run.id not in runs:
                runs[run.id] = FoundRun(registry.get_run(run.id), registry.home_of(run))
        named.append((reference, run))
    return FoundRuns(named, list(runs.values()))
