"""`track`: send a run's whole history to a tracker afterwards (the library call behind `rlrun track`),
for a run trained without it, or one whose tracker was down: every session's metrics log and
evaluations, the same points a live session sends, into the session's tracker run (rewound first
when it exists, so nothing is there twice)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rlrun import paths
from rlrun.errors import BadInput
from rlrun.refs import RunFilter, RunRef
from rlrun.registry import Registry
from rlrun.session import metrics_log
from rlrun.trackers import Identity, check_installed, history, make_tracker, status
from rlrun.trackers.base import Tracker
from rlrun.trackers.delivery import describe


def track(
    ref: RunRef | str = "latest", filters: RunFilter | None = None, *, to: Sequence[str], home: Path | str | None = None
) -> list[tuple[int, status.Delivered]]:
    """Send run `ref`'s history to each tracker in `to`; returns what each session's tracker run
    got. A tracker that fails is BadInput, naming it and the session (what was sent stays there,
    and the next `track` replaces it)."""
    check_installed(to)
    root = paths.resolve_home(home)
    with Registry.open(root, create=False) as registry:
        run = registry.resolve(ref, filters)
        detail = registry.get_run(run.id)
        spec = json.loads(registry.latest_spec(run.id).spec_json)
        search = registry.search_of(run.id)
    sent: list[tuple[int, status.Delivered]] = []
    for session in detail.sessions:
        folder = paths.session_dir(root, run.id, session.index)
        log = metrics_log.path(folder)
        metrics_log.download(log)  # a home in object storage: the store's log, not this machine's copy
        rows = metrics_log.read_rows(log)[1] if log.exists() else []
        evaluations = [
            {"frame": e.frame, "mean": e.mean, "std": e.std}
            for e in detail.evaluations
            if e.session_index == session.index and e.kind == "train"
        ]
        points = history(rows, evaluations)
        identity = Identity(run.id, session.index, session.seed, spec, group=search)
        reached = status.read(folder)
        for name in to:
            tracker: Tracker = make_tracker(name)  # type: ignore[assignment]
            try:
                # a tracker run some attempt reached holds points: rewound, so none is there twice
                found = tracker.start(identity, rewind=name in reached and reached[name].run is not None)
                tracker.send(points)
                tracker.finish(session.status, session.best_eval)
            except Exception as error:  # whatever the tracker raises: one line, naming it
                raise BadInput(
                    f"{name} did not take the history of {run.id}/s{session.index}: {describe(error)};"
                    " check where it points (its environment variables) and try again"
                ) from None
            delivered = status.Delivered(name, found, 0, None, max((p.frame for p in points), default=None))
            status.write(folder, [delivered])
            sent.append((session.index, delivered))
    return sent
