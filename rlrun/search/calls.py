"""The library calls behind `rlrun search` and `rlrun resume search:...`: `run_search` records a
new search and drives it, `resume_search` reopens a stopped one, `drive_search` drives one taken
over elsewhere (a detached driver); each checks first, before anything is written."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from rlrun import paths, storage
from rlrun.errors import BadInput
from rlrun.ids import new_run_id
from rlrun.refs import check_run_name, parse_search_ref
from rlrun.registry import Registry
from rlrun.registry.records import SearchRecord
from rlrun.search.optuna_adapter import load_optuna
from rlrun.search.outcomes import OnTrial, SearchResult, outcome_of
from rlrun.search.plan import driver_for, recorded_plan
from rlrun.search.settings import SearchPlan, Settings
from rlrun.search.trial import MakeExecutor
from rlrun.session import events, stopping
from rlrun.session.stopping import StopRequest
from rlrun.spec import Spec, user_code


class HandOver(Protocol):
    """Hands a search's driving to somewhere that outlives this process (`--detach`: an actor on
    a Ray cluster, `rlrun.search.detached`)."""

    def prepare(self, root: Path, url: str, spec: Spec) -> None:
        """Check, before anything is written, that the search can be driven there."""

    def start(self, root: Path, url: str, search_id: str) -> str:
        """Start the driver there, return once it has taken the recorded search over, and say who it is."""


def run_search(
    plan: SearchPlan,
    *,
    home: Path | str | None = None,
    name: str | None = None,
    on_event: Callable[[events.Event], None] | None = None,
    on_trial: OnTrial | None = None,
    on_start: Callable[[SearchRecord], None] | None = None,
    make_executor: MakeExecutor | None = None,
    hand_over: HandOver | None = None,
) -> SearchResult:
    """Record a new search and run its trials, one at a time or `parallel` at a time; returns when
    they are done or a signal (or `rlrun stop search:`) stopped it (the result's `signal`).
    `make_executor` makes each trial's executor (by default the local one), given the stop the
    pruner requests; trials trained at once make theirs in their worker processes
    (`WorkerExecutors`). `hand_over`: the search is recorded here and driven elsewhere; returns
    once it is.

    Args:
        plan: What `plan_search` decided.
        home: The runs home: a folder or an object-store URL (None: $RLRUN_HOME, else ./runs).
        name: A name for the search, unique in the home.
        on_event: Hears every event the trials' sessions report, as for `train`.
        on_trial: Hears each trial's outcome as it ends.
        on_start: Hears of the search once it is recorded, before its first trial.
        make_executor: Makes each trial's executor, given the stop the pruner requests; None: the
            local one.
        hand_over: Where the search is driven instead of here (`--detach`); None: here.

    Returns:
        The search's id and status, its trials' outcomes (`best`: the best scored), and the
        signal that stopped it (0: none).
    """
    root = paths.resolve_home(home)
    storage.reach(root)
    url = paths.database_url(root)
    if name is not None:
        check_run_name(name)
    if hand_over is not None:
        _check_settings(make_executor, plan.settings, hand_over)
        hand_over.prepare(root, url, plan.spec)
    else:
        _check_executor(make_executor, plan.settings, root, url, plan.spec)
    stopping.raise_if_stopped("before the search was recorded; nothing was written")
    with Registry.open(root, url) as registry:
        record = registry.create_search(
            search_id=new_run_id(),
            name=name,
            spec_name=plan.spec.name,
            spec_json=json.dumps(plan.spec.to_json()),
            space_json=json.dumps(plan.space),
            settings_json=json.dumps(plan.settings.to_json()),
            host=socket.gethostname(),
            pid=os.getpid(),
        )
    if on_start is not None:
        on_start(record)
    if hand_over is not None:
        return _handed_over(hand_over, root, url, record)
    return driver_for(plan.settings)(root, url, record, plan, on_event, on_trial, make_executor).drive()


def _handed_over(hand_over: HandOver, root: Path, url: str, record: SearchRecord) -> SearchResult:
    where = hand_over.start(root, url, record.id)
    with Registry.open(root, url) as registry:
        trials = registry.get_search(record.id).trials
    return SearchResult(record.id, record.name, str(root), "running", [outcome_of(t) for t in trials], detached=where)


def resume_search(
    ref: str,
    *,
    home: Path | str | None = None,
    on_event: Callable[[events.Event], None] | None = None,
    on_trial: OnTrial | None = None,
    on_start: Callable[[SearchRecord], None] | None = None,
    make_executor: MakeExecutor | None = None,
    hand_over: HandOver | None = None,
) -> SearchResult:
    """Continue a search: ended trials are kept, an interrupted one continues from its run's
    snapshots, the rest are suggested as they would have been. A finished search: nothing to do.
    `hand_over`: continued elsewhere (as `run_search` says); returns once it is.

    Args:
        ref: The search: `search:latest`, `search:ID` or its name.
        home: The runs home: a folder or an object-store URL (None: $RLRUN_HOME, else ./runs).
        on_event: As for `run_search`.
        on_trial: As for `run_search`.
        on_start: As for `run_search`.
        make_executor: As for `run_search`.
        hand_over: As for `run_search`.

    Returns:
        As for `run_search`.
    """
    root = paths.resolve_home(home)
    storage.reach(root)
    url = paths.database_url(root)
    with Registry.open(root, url, create=False) as registry:
        record = registry.resolve_search(parse_search_ref(ref))
        detail = registry.get_search(record.id)
    if record.status == "running":  # its driver heartbeats (`rlrun.registry.liveness`)
        raise BadInput(
            f"search {record.id} is still running (pid {record.pid} on {record.host}); stop it with"
            " SIGTERM or wait for it to end"
        )
    plan = recorded_plan(record)
    settings, spec = plan.settings, plan.spec
    if on_start is not None:
        on_start(record)
    ended = [t for t in detail.trials if t.state != "running"]
    if len(ended) >= settings.trials:
        return SearchResult(
            record.id, record.name, str(root), record.status, [outcome_of(t) for t in detail.trials], nothing_to_do=True
        )
    load_optuna()
    if hand_over is not None:
        _check_settings(make_executor, settings, hand_over)
        hand_over.prepare(root, url, spec)
        stopping.raise_if_stopped(f"before search {record.id} was handed over; nothing was written")
        return _handed_over(hand_over, root, url, record)  # the driver there reopens it
    _check_executor(make_executor, settings, root, url, spec)
    stopping.raise_if_stopped(f"before search {record.id} was reopened; nothing was written")
    with Registry.open(root, url) as registry:
        registry.reopen_search(record.id, host=socket.gethostname(), pid=os.getpid())
    return driver_for(settings)(root, url, record, plan, on_event, on_trial, make_executor).drive()


def drive_search(root: Path, url: str, search_id: str, make_executor: MakeExecutor) -> SearchResult:
    """Drive a search that this process has just taken over (`Registry.reopen_search`), to its end:
    a detached search's driver does this where `resume_search` would, without signal handlers (it
    runs in a thread of its own) and without checks the command made already."""
    with Registry.open(root, url, create=False) as registry:
        record = registry.get_search(search_id).search
    plan = recorded_plan(record)
    load_optuna()
    driver = driver_for(plan.settings)(root, url, record, plan, None, None, make_executor)
    driver.handle_signals = False
    return driver.drive()


def _check_executor(make_executor: MakeExecutor | None, settings: Settings, root: Path, url: str, spec: Spec) -> None:
    """The check `train` makes of its executor (a Ray cluster: reachable, and every node sees the
    home), made once for the whole search before anything is written; each trial's run makes it
    again as it starts."""
    if make_executor is None:
        return
    _check_settings(make_executor, settings)
    executor = make_executor(StopRequest())
    try:
        executor.prepare(root, url, modules=user_code(spec))
    finally:
        executor.close()


def _check_settings(make_executor: MakeExecutor | None, settings: Settings, hand_over: HandOver | None = None) -> None:
    """Trials trained at once each have a worker process of the driver's machine, which makes the
    trial's executor: refused for a detached driver (one trial at a time), and for an executor that
    cannot be sent there (`WorkerExecutors`), rather than ignored."""
    if settings.parallel == 1:
        return
    if hand_over is not None:
        raise BadInput(
            f"a detached search drives one trial at a time, but this search runs {settings.parallel} at a"
            f" time (--parallel {settings.parallel}, recorded with it): drop --detach (a SLURM driver job:"
            " add --wait, and the trials are SLURM jobs, that many at a time), or search with --parallel 1"
        )
    if make_executor is not None and not hasattr(make_executor, "for_worker"):
        raise BadInput(
            f"this search runs {settings.parallel} trials at a time (--parallel), each from a worker"
            " process, which this executor cannot be sent to: drop --parallel"
        )
