"""The search driver: records, status, heartbeat and signals around the trials, trained one at a
time or `parallel` at a time (each in a worker process of its own), until the last ends or a stop
is asked. Population-based training's driver (`rlrun.search.population`) is this one with
generations of segments in place of trials."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from signal import SIGTERM
from typing import TYPE_CHECKING, Any

from rlrun.errors import Stopped
from rlrun.registry import Registry
from rlrun.registry.records import SearchRecord, TrialRecord
from rlrun.search.heartbeat import DriverHeartbeat
from rlrun.search.optuna_adapter import importance
from rlrun.search.outcomes import OnTrial, SearchResult, outcome_of
from rlrun.search.settings import SearchPlan
from rlrun.search.trial import MakeExecutor, Trial, WorkerExecutors, local_executor, trial_worker
from rlrun.session import events, stopping
from rlrun.session.stopping import StopRequest

if TYPE_CHECKING:
    from rlrun.training.supervisor import Supervisor, Work


def told(trials: list[TrialRecord], number: int, parallel: int) -> list[TrialRecord]:
    """The ended trials trial `number` is suggested (and pruned) from: those `parallel` places or
    more before it, never one that happened to end sooner (one at a time: every earlier trial)."""
    return [t for t in trials if t.state != "running" and t.number <= number - parallel]


def may_start(trials: list[TrialRecord], number: int, parallel: int) -> bool:
    """Whether trial `number` may be suggested: every trial `parallel` places or more before it has
    ended (it is told them all, `told`)."""
    ended = {t.number for t in trials if t.state != "running"}
    return all(earlier in ended for earlier in range(number - parallel + 1))


class Driver:
    def __init__(
        self,
        root: Path,
        url: str,
        record: SearchRecord,
        plan: SearchPlan,
        on_event: Callable[[events.Event], None] | None,
        on_trial: OnTrial | None,
        make_executor: MakeExecutor | None,
    ) -> None:
        self.root, self.url, self.record, self.plan = root, url, record, plan
        self.on_event = on_event or (lambda event: None)
        self.on_trial = on_trial or (lambda outcome: None)
        self.make_executor = make_executor or local_executor
        self.worker_executors: WorkerExecutors | None = getattr(make_executor, "for_worker", lambda: None)()
        """What a parallel trial's worker makes its executor with (None: the local one)."""
        self.handle_signals = True
        """Whether a trial trained here takes SIGINT/SIGTERM as a stop (not in a detached driver's thread)."""

    def drive(self) -> SearchResult:
        signal, status = 0, "finished"
        self.error: str | None = None
        self.interrupted: str | None = None
        """Why the search stopped short of failing (its cluster was lost): `resume search:` continues it."""
        self.heartbeat = DriverHeartbeat(
            self.root, self.url, self.record.id, host=socket.gethostname(), pid=os.getpid()
        )
        with Registry.open(self.root, self.url) as registry, self.heartbeat:
            try:
                signal = (
                    self._one_at_a_time(registry)
                    if self.plan.settings.parallel == 1
                    else self._several_at_once(registry)
                )
            except Stopped as stopped:
                signal = stopped.exit_code - 128
            except BaseException as raised:
                if not self.heartbeat.superseded:
                    registry.finish_search(self.record.id, status="failed", error=f"{type(raised).__name__}: {raised}")
                raise
            if signal:
                status = "preempted"
            elif self.interrupted is not None:
                status, self.error = "interrupted", self.interrupted
            elif self.error is not None:
                status = "failed"
            detail = registry.get_search(self.record.id)
            found = importance(detail) if status == "finished" else None
            if not self.heartbeat.superseded:  # resumed by another driver: the search is its to end
                registry.finish_search(
                    self.record.id,
                    status=status,
                    error=self.error,
                    importance_json=None if found is None else json.dumps(found),
                )
            trials = detail.trials
        return SearchResult(
            self.record.id,
            self.record.name,
            str(self.root),
            status,
            [outcome_of(t) for t in trials],
            signal,
            error=self.error,
        )

    def _next(self, registry: Registry, numbers: Any) -> tuple[int, TrialRecord | None, list[TrialRecord]] | None:
        """The next trial to work on (a new one, or one left running), with the ended trials; none
        once another driver has taken the search over, its cluster was lost, or a stop was asked."""
        for number in numbers:
            if (
                self.heartbeat.superseded
                or self.interrupted is not None
                or self._stop_signal()
                or self.heartbeat.stop_asked(registry)
            ):  # not only at its beat: a stop asked just now
                return None
            trials = registry.get_search(self.record.id).trials
            existing = next((t for t in trials if t.number == number), None)
            if existing is None or existing.state == "running":
                return number, existing, told(trials, number, self.plan.settings.parallel)
        return None

    def _stop_signal(self) -> int:
        """The stop asked of the driver, as a signal: one it received (held between trials), or
        SIGTERM's when `rlrun stop search:` asked (its heartbeat saw the request, and asks the
        trials in flight to stop); 0 while none."""
        return stopping.pending() or (int(SIGTERM) if self.heartbeat.stop_requested else 0)

    def _one_at_a_time(self, registry: Registry) -> int:
        numbers = iter(range(self.plan.settings.trials))
        while not self._stop_signal() and (found := self._next(registry, numbers)) is not None:
            signal = Trial(self, registry, *found).run()
            if signal:
                return signal
        return self._stop_signal()

    def _several_at_once(self, registry: Registry) -> int:
        """Up to `parallel` trials at once, each trained in a worker process of its own (sessions of
        different trials must not share a process: their random generators are the process's), and
        scored here as their events come. Trial n is suggested once a place is free and the trials
        up to n - parallel have ended, and is told those alone (`told`): which trial ends first
        changes nothing, so the search is the same however long each trial takes, wherever it trains
        (local processes, a Ray cluster, SLURM jobs), and resumed, the search never stopped."""
        from rlrun.training.supervisor import Supervisor

        trials: dict[int, Trial] = {}

        def deliver(number: int, message: tuple[str, Any]) -> bool:
            kind, payload = message
            trial = trials[number]
            if kind == "event":
                trial._event(payload)
            elif kind == "started":
                trial._started(payload)
            elif kind == "interrupted":  # its cluster was lost: the trial stays running
                self.interrupted = f"trial {number} interrupted: {payload}"
            else:
                self._stop_all_once_stopped(supervisor, trial.conclude(*payload))
            return kind in ("ended", "interrupted")

        supervisor = Supervisor(deliver, self._lost, at_most=self.plan.settings.parallel)
        return supervisor.run(self._pending_trials(registry, trials, supervisor.stop)) or self._stop_signal()

    def _stop_all_once_stopped(self, supervisor: Supervisor, stopped: int) -> None:
        """A trial (or a segment) that a signal or `rlrun stop` ended, or a stop asked of the
        search, stops the search as a SIGTERM to the driver does: the workers still training stop
        theirs with a snapshot, none more starts, and the search ends preempted."""
        signal = stopped or self._stop_signal()
        if signal and not supervisor.stop.signal:
            supervisor.stop.request(signal)

    def _pending_trials(
        self, registry: Registry, trials: dict[int, Trial], stopped: StopRequest
    ) -> Iterator[Work | None]:
        """The trials to train, suggested one by one in their order as the supervisor asks (None:
        the next may not start yet, `may_start`); none once it stopped."""
        from rlrun.training.supervisor import Work

        parallel = self.plan.settings.parallel
        numbers = iter(range(self.plan.settings.trials))
        while not stopped.signal and (found := self._next(registry, numbers)) is not None:
            number = found[0]
            while not may_start(trials_now := registry.get_search(self.record.id).trials, number, parallel):
                if stopped.signal or self.heartbeat.superseded or self.interrupted is not None:
                    return
                yield None  # not yet: the supervisor asks again as trials end, and stops once none trains
            trial = Trial(self, registry, number, found[1], told(trials_now, number, parallel))
            job = trial.prepare()
            if job is not None:
                trials[job.number] = trial
                yield Work(
                    job.number,
                    trial_worker,
                    (job, str(self.root), self.worker_executors),
                    trial.stop,
                    name=f"rlrun-t{job.number}",
                )

    def _lost(self, number: int, exitcode: int | None) -> None:
        """A worker that died without a word (killed, out of memory): its trial stays running, for
        `rlrun resume search:...` to continue, and the search ends failed, saying which."""
        self.error = f"trial {number}'s worker process exited with code {exitcode}"
