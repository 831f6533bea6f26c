"""What a search reports: each trial's outcome as it ends (`TrialOutcome`, to `on_trial`) and the
search's result (`SearchResult`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from rlrun.registry.records import TrialRecord

OnTrial = Callable[["TrialOutcome"], None]


@dataclass(frozen=True)
class TrialOutcome:
    number: int
    run_id: str | None
    params: dict[str, Any]
    state: str
    value: float | None
    note: str | None = None


@dataclass(frozen=True)
class SearchResult:
    search_id: str
    name: str | None
    home: str
    status: str
    trials: list[TrialOutcome]
    signal: int = 0
    nothing_to_do: bool = False
    error: str | None = None
    detached: str | None = None
    """Who drives the search on the cluster (`--detach`: an actor, named as the command says it); the
    trials so far then, and the status running."""

    @property
    def best(self) -> TrialOutcome | None:
        scored = [t for t in self.trials if t.state == "complete" and t.value is not None]
        return max(scored, key=lambda t: (t.value, -t.number)) if scored else None

    def to_json(self) -> dict[str, Any]:
        document = asdict(self)
        best = self.best
        document["best"] = None if best is None else asdict(best)
        return document


def outcome_of(trial: TrialRecord) -> TrialOutcome:
    return TrialOutcome(trial.number, trial.run_id, trial.params, trial.state, trial.value, trial.note)
