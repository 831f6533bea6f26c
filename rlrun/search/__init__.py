"""Hyper-parameter search: `run_search` and `resume_search`, the library calls behind
`rlrun search` and `rlrun resume search:...`.

A search suggests trials with Optuna over a spec's search space (`rlrun.search.space`) and trains
each as an ordinary run through the training API (`rlrun.training`): its score is the mean over
the run's sessions of an evaluation statistic, and a pruner stops a poor trial early on its
evaluation curve (the stopped run keeps its snapshot: `rlrun resume` can continue it).

The registry, not Optuna, holds the search (`searches` and `trials`: the runs, their parameters,
their scores at each evaluation, their end). Each suggestion is made by a fresh in-memory Optuna
study that is told every ended trial, with a sampler seeded from the spec's seed and the trial's
number: a pure function of what came before. A long-lived seeded sampler would not do: its random
generator advances with every suggestion, so a resumed driver, replaying the same trials into a
new sampler, would suggest something else. So a search killed at any moment and resumed
(`rlrun resume search:REF`) suggests the same trials, and each interrupted trial continues from its
run's snapshots exactly (`rlrun.training.resume`): with one trial at a time, the resumed search is
the uninterrupted one, trial for trial.
"""

from __future__ import annotations

import json
import math
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from signal import SIGTERM
from typing import TYPE_CHECKING, Any, Protocol

from rlrun import paths, seeding, storage
from rlrun.errors import BadInput, ClusterLost, ClusterUnreachable, Stopped, install_hint
from rlrun.ids import new_run_id
from rlrun.refs import check_run_name, parse_search_ref
from rlrun.registry import Registry
from rlrun.registry.records import SearchRecord, TrialLink, TrialRecord
from rlrun.search import space as search_space
from rlrun.search.heartbeat import DriverHeartbeat
from rlrun.search.space import Dimension
from rlrun.session import events, stopping
from rlrun.session.stopping import StopRequest
from rlrun.spec import Spec, apply_overrides, read_document, recorded_spec, user_code, validate_spec
from rlrun.trackers import check_installed

if TYPE_CHECKING:
    import optuna

    from rlrun.training.executor import Executor
    from rlrun.training.supervisor import Supervisor, Work

METRICS = ("eval_mean", "best_eval")
"""eval_mean: each session's evaluation at the end of training; best_eval: each session's best
evaluation. Either way averaged over the run's sessions."""
SAMPLERS = ("tpe", "random", "grid")
PRUNERS = ("median", "halving", "none")
PRUNE = -1
"""What a search asks of a trial's sessions when it prunes it: stop, as after a signal (not one)."""
RANDOM_TRIALS = 10
"""Trials TPE samples at random before it models the scores (Optuna's default)."""
PRUNE_AFTER = 5
"""Trials the median pruner waits for before it prunes (Optuna's default)."""
SAMPLER_STREAM = 101
"""The seeding stream of suggestions (`rlrun.seeding.derive(spec seed, SAMPLER_STREAM, trial)`)."""

OnTrial = Callable[["TrialOutcome"], None]
MakeExecutor = Callable[[StopRequest], "Executor"]


class WorkerExecutors(Protocol):
    """A `MakeExecutor` that trials trained at once may take to their worker processes: plain data
    (it is pickled), its `for_worker` copy leaving signals to the driver (`RayTrials`)."""

    def __call__(self, stop: StopRequest) -> Executor: ...

    def for_worker(self) -> WorkerExecutors: ...


@dataclass(frozen=True)
class Settings:
    """How a search suggests, scores and prunes; stored with it, so a resume does the same."""

    trials: int
    metric: str = "eval_mean"
    sampler: str = "tpe"
    pruner: str = "median"
    seed: int = 0
    parallel: int = 1
    random_trials: int = RANDOM_TRIALS
    prune_after: int = PRUNE_AFTER

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


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


@dataclass(frozen=True)
class SearchPlan:
    """A search decided before anything is written: the base spec, its space and the settings."""

    spec: Spec
    dimensions: list[Dimension]
    settings: Settings
    space: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Planning: everything checked before anything is written


def plan_search(source: str | Path | dict[str, Any], overrides: list[str] | None = None, *,
                trials: int | None = None, metric: str = "eval_mean", sampler: str | None = None,
                pruner: str = "median", parallel: int = 1, prune_after: int = PRUNE_AFTER) -> SearchPlan:
    """The search a spec with a `search` block asks for; BadInput (or SpecError) when it cannot
    run, before anything is written or Optuna is imported."""
    document = source if isinstance(source, dict) else read_document(source)
    base_document, block = search_space.split(apply_overrides(document, overrides or []))
    if block is None:
        raise BadInput(f"spec {_label(source)} has no search block; add one, e.g. "
                       f'"search": {{"agent.optimizer.lr": {search_space.EXAMPLE}}}, or train it with `rlrun train`')
    spec = validate_spec(base_document)
    dimensions = search_space.parse(block, spec.to_json())
    grid = search_space.is_grid(dimensions)
    chosen_sampler = sampler or ("grid" if grid else "tpe")
    _check_choice("--metric", metric, METRICS)
    _check_choice("--sampler", chosen_sampler, SAMPLERS)
    _check_choice("--pruner", pruner, PRUNERS)
    if chosen_sampler == "grid" and not grid:
        ranges = ", ".join(d.path for d in dimensions if d.kind != "grid")
        raise BadInput(f"--sampler grid needs every dimension to be a grid; {ranges} is not: make it a grid or"
                       " use --sampler tpe")
    if chosen_sampler == "grid":
        size = search_space.grid_size(dimensions)
        if trials is not None and trials > size:
            raise BadInput(f"--trials {trials} is more than the grid's {size} points; give at most {size}")
        trials = trials or size
    if trials is None:
        raise BadInput("say how many trials to run: --trials N")
    if trials < 1 or parallel < 1:
        raise BadInput("--trials and --parallel take a count of at least 1")
    _optuna()
    from rlrun.training import check_compatible

    check_compatible(spec)
    check_installed(spec.meta.track)
    settings = Settings(trials=trials, metric=metric, sampler=chosen_sampler, pruner=pruner, seed=spec.meta.seed,
                        parallel=parallel, prune_after=prune_after)
    return SearchPlan(spec, dimensions, settings, {d.path: d.to_json() for d in dimensions})


def _label(source: str | Path | dict[str, Any]) -> str:
    return "(a document)" if isinstance(source, dict) else str(source)


def _check_choice(option: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        from rlrun.spec import did_you_mean

        hint = did_you_mean(value, list(allowed)) or f" use one of {', '.join(allowed)}"
        raise BadInput(f"{option} {value!r} is not one of {', '.join(allowed)};{hint}")


def _optuna() -> Any:
    """Optuna, an optional extra: one line naming the fix when it is missing."""
    try:
        import optuna
    except ImportError:
        raise BadInput(f"searching needs Optuna: {install_hint('search')}") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


# ---------------------------------------------------------------------------------------------
# The calls


class HandOver(Protocol):
    """Hands a search's driving to somewhere that outlives this process (`--detach`: an actor on
    a Ray cluster, `rlrun.search.detached`)."""

    def prepare(self, root: Path, url: str, spec: Spec) -> None:
        """Check, before anything is written, that the search can be driven there."""

    def start(self, root: Path, url: str, search_id: str) -> str:
        """Start the driver there, return once it has taken the recorded search over, and say who it is."""


def run_search(plan: SearchPlan, *, home: Path | str | None = None, name: str | None = None,
               on_event: Callable[[events.Event], None] | None = None, on_trial: OnTrial | None = None,
               on_start: Callable[[SearchRecord], None] | None = None,
               make_executor: MakeExecutor | None = None, hand_over: HandOver | None = None) -> SearchResult:
    """Record a new search and run its trials, one at a time or `parallel` at a time; returns when
    they are done or a signal (or `rlrun stop search:`) stopped it (the result's `signal`).
    `make_executor` makes each trial's executor (by default the local one), given the stop the
    pruner requests; trials trained at once make theirs in their worker processes
    (`WorkerExecutors`). `hand_over`: the search is recorded here and driven elsewhere; returns
    once it is."""
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
            search_id=new_run_id(), name=name, spec_name=plan.spec.name, spec_json=json.dumps(plan.spec.to_json()),
            space_json=json.dumps(plan.space), settings_json=json.dumps(plan.settings.to_json()),
            host=socket.gethostname(), pid=os.getpid(),
        )  # fmt: skip
    if on_start is not None:
        on_start(record)
    if hand_over is not None:
        return _handed_over(hand_over, root, url, record)
    return _driver(plan.settings)(root, url, record, plan, on_event, on_trial, make_executor).drive()


def _handed_over(hand_over: HandOver, root: Path, url: str, record: SearchRecord) -> SearchResult:
    where = hand_over.start(root, url, record.id)
    with Registry.open(root, url) as registry:
        trials = registry.get_search(record.id).trials
    return SearchResult(record.id, record.name, str(root), "running", [_outcome(t) for t in trials], detached=where)


def resume_search(ref: str, *, home: Path | str | None = None,
                  on_event: Callable[[events.Event], None] | None = None, on_trial: OnTrial | None = None,
                  on_start: Callable[[SearchRecord], None] | None = None,
                  make_executor: MakeExecutor | None = None, hand_over: HandOver | None = None) -> SearchResult:
    """Continue a search: ended trials are kept, an interrupted one continues from its run's
    snapshots, the rest are suggested as they would have been. A finished search: nothing to do.
    `hand_over`: continued elsewhere (as `run_search` says); returns once it is."""
    root = paths.resolve_home(home)
    storage.reach(root)
    url = paths.database_url(root)
    with Registry.open(root, url, create=False) as registry:
        record = registry.resolve_search(parse_search_ref(ref))
        detail = registry.get_search(record.id)
    if record.status == "running":  # its driver heartbeats (`rlrun.registry.liveness`)
        raise BadInput(f"search {record.id} is still running (pid {record.pid} on {record.host}); stop it with"
                       " SIGTERM or wait for it to end")
    plan = _recorded_plan(record)
    settings, spec = plan.settings, plan.spec
    if on_start is not None:
        on_start(record)
    ended = [t for t in detail.trials if t.state != "running"]
    if len(ended) >= settings.trials:
        return SearchResult(record.id, record.name, str(root), record.status, [_outcome(t) for t in detail.trials],
                            nothing_to_do=True)
    _optuna()
    if hand_over is not None:
        _check_settings(make_executor, settings, hand_over)
        hand_over.prepare(root, url, spec)
        stopping.raise_if_stopped(f"before search {record.id} was handed over; nothing was written")
        return _handed_over(hand_over, root, url, record)  # the driver there reopens it
    _check_executor(make_executor, settings, root, url, spec)
    stopping.raise_if_stopped(f"before search {record.id} was reopened; nothing was written")
    with Registry.open(root, url) as registry:
        registry.reopen_search(record.id, host=socket.gethostname(), pid=os.getpid())
    return _driver(settings)(root, url, record, plan, on_event, on_trial, make_executor).drive()


def drive_search(root: Path, url: str, search_id: str, make_executor: MakeExecutor) -> SearchResult:
    """Drive a search that this process has just taken over (`Registry.reopen_search`), to its end:
    a detached search's driver does this where `resume_search` would, without signal handlers (it
    runs in a thread of its own) and without checks the command made already."""
    with Registry.open(root, url, create=False) as registry:
        record = registry.get_search(search_id).search
    plan = _recorded_plan(record)
    _optuna()
    driver = _driver(plan.settings)(root, url, record, plan, None, None, make_executor)
    driver.handle_signals = False
    return driver.drive()


# --- population-based training (`rlrun.search.population`): its settings and its driver ------


def _recorded_plan(record: SearchRecord) -> SearchPlan:
    """The search as it was recorded: its spec, space and settings, to continue it."""
    settings = _settings(record.settings_json)
    spec = recorded_spec(json.loads(record.spec_json))
    return SearchPlan(spec, search_space.load(record.space_json), settings, json.loads(record.space_json))


def _settings(settings_json: str) -> Settings:
    document = json.loads(settings_json)
    if document.get("scheduler") == "pbt":
        from rlrun.search.population import PbtSettings

        return PbtSettings.from_json(document)
    return Settings(**document)


def _driver(settings: Settings) -> type[_Driver]:
    if getattr(settings, "scheduler", None) == "pbt":
        from rlrun.search.population import PbtDriver

        return PbtDriver
    return _Driver


# --- end of population-based training ---------------------------------------------------------


def _check_executor(make_executor: MakeExecutor | None, settings: Settings, root: Path, url: str,
                    spec: Spec) -> None:
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
        raise BadInput(f"a detached search drives one trial at a time, but this search runs {settings.parallel} at a"
                       f" time (--parallel {settings.parallel}, recorded with it): drop --detach, or search with"
                       " --parallel 1")
    if make_executor is not None and not hasattr(make_executor, "for_worker"):
        raise BadInput(f"this search runs {settings.parallel} trials at a time (--parallel), each from a worker"
                       " process, which this executor cannot be sent to: drop --parallel")


def _outcome(trial: TrialRecord) -> TrialOutcome:
    return TrialOutcome(trial.number, trial.run_id, trial.params, trial.state, trial.value, trial.note)


# ---------------------------------------------------------------------------------------------
# The driver


class _Driver:
    def __init__(self, root: Path, url: str, record: SearchRecord, plan: SearchPlan,
                 on_event: Callable[[events.Event], None] | None, on_trial: OnTrial | None,
                 make_executor: MakeExecutor | None) -> None:  # fmt: skip
        self.root, self.url, self.record, self.plan = root, url, record, plan
        self.on_event = on_event or (lambda event: None)
        self.on_trial = on_trial or (lambda outcome: None)
        self.make_executor = make_executor or _local_executor
        self.worker_executors: WorkerExecutors | None = getattr(make_executor, "for_worker", lambda: None)()
        """What a parallel trial's worker makes its executor with (None: the local one)."""
        self.handle_signals = True
        """Whether a trial trained here takes SIGINT/SIGTERM as a stop (not in a detached driver's thread)."""

    def drive(self) -> SearchResult:
        signal, status = 0, "finished"
        self.error: str | None = None
        self.interrupted: str | None = None
        """Why the search stopped short of failing (its cluster was lost): `resume search:` continues it."""
        self.heartbeat = DriverHeartbeat(self.root, self.url, self.record.id, host=socket.gethostname(),
                                         pid=os.getpid())
        with Registry.open(self.root, self.url) as registry, self.heartbeat:
            try:
                signal = self._one_at_a_time(registry) if self.plan.settings.parallel == 1 else \
                    self._several_at_once(registry)
            except Stopped as stopped:
                signal = stopped.exit_code - 128
            except BaseException as raised:
                if not self.heartbeat.superseded:
                    registry.finish_search(self.record.id, status="failed",
                                           error=f"{type(raised).__name__}: {raised}")
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
                registry.finish_search(self.record.id, status=status, error=self.error,
                                       importance_json=None if found is None else json.dumps(found))
            trials = detail.trials
        return SearchResult(self.record.id, self.record.name, str(self.root), status, [_outcome(t) for t in trials],
                            signal, error=self.error)

    def _next(self, registry: Registry, numbers: Any) -> tuple[int, TrialRecord | None, list[TrialRecord]] | None:
        """The next trial to work on (a new one, or one left running), with the ended trials; none
        once another driver has taken the search over, its cluster was lost, or a stop was asked."""
        for number in numbers:
            if self.heartbeat.superseded or self.interrupted is not None or self._stop_signal() or \
                    self.heartbeat.stop_asked(registry):  # not only at its beat: a stop asked just now
                return None
            trials = registry.get_search(self.record.id).trials
            existing = next((t for t in trials if t.number == number), None)
            if existing is None or existing.state == "running":
                return number, existing, [t for t in trials if t.state != "running"]
        return None

    def _stop_signal(self) -> int:
        """The stop asked of the driver, as a signal: one it received (held between trials), or
        SIGTERM's when `rlrun stop search:` asked (its heartbeat saw the request, and asks the
        trials in flight to stop); 0 while none."""
        return stopping.pending() or (int(SIGTERM) if self.heartbeat.stop_requested else 0)

    def _one_at_a_time(self, registry: Registry) -> int:
        numbers = iter(range(self.plan.settings.trials))
        while not self._stop_signal() and (found := self._next(registry, numbers)) is not None:
            signal = _Trial(self, registry, *found).run()
            if signal:
                return signal
        return self._stop_signal()

    def _several_at_once(self, registry: Registry) -> int:
        """Up to `parallel` trials at once, each trained in a worker process of its own (sessions of
        different trials must not share a process: their random generators are the process's), and
        scored here as their events come. The next trial is suggested only when a place is free: it
        depends on the trials ended by then."""
        from rlrun.training.supervisor import Supervisor

        trials: dict[int, _Trial] = {}

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

    def _pending_trials(self, registry: Registry, trials: dict[int, _Trial], stopped: StopRequest) -> Iterator[Work]:
        """The trials to train, suggested one by one as the supervisor asks; none once it stopped."""
        from rlrun.training.supervisor import Work

        numbers = iter(range(self.plan.settings.trials))
        while not stopped.signal and (found := self._next(registry, numbers)) is not None:
            trial = _Trial(self, registry, *found)
            job = trial.prepare()
            if job is not None:
                trials[job.number] = trial
                yield Work(job.number, _trial_worker, (job, str(self.root), os.getpid(), self.worker_executors),
                           trial.stop, name=f"rlrun-t{job.number}")

    def _lost(self, number: int, exitcode: int | None) -> None:
        """A worker that died without a word (killed, out of memory): its trial stays running, for
        `rlrun resume search:...` to continue, and the search ends failed, saying which."""
        self.error = f"trial {number}'s worker process exited with code {exitcode}"


def _trial_worker(job: Job, home: str, parent: int, executors: WorkerExecutors | None, outbox: Any,
                  shared_stop: Any) -> None:
    """A parallel trial's worker process (`_train_trial`)."""
    _train_trial(job, home, parent, executors, outbox, shared_stop)


def _train_trial(job: Job, home: str, parent: int, executors: WorkerExecutors | None, outbox: Any,
                 shared_stop: Any) -> bool:
    """A worker process: train one trial, its events and end sent to the driver; its sessions here
    (`executors` None), or placed on a Ray cluster by the executor `executors` makes. Signals are
    the driver's to forward (a Ctrl-C reaches the whole process group); a worker whose driver died
    stops its trial at the next event, with a snapshot. False when the trial's cluster was lost
    (the trial stays running, for `rlrun resume search:` to continue)."""
    import signal

    from rlrun.errors import RlrunError
    from rlrun.training.local import LocalExecutor

    for number in stopping.SIGNALS:
        signal.signal(number, signal.SIG_IGN)
    stop = StopRequest(shared_stop)

    def emit(event: events.Event) -> None:
        if os.getppid() != parent and not stop.signal:
            stop.request(signal.SIGTERM)
        outbox.put(("event", event))

    executor = LocalExecutor(handle_signals=False, stop=stop) if executors is None else executors(stop)
    try:
        result = job.run(Path(home), emit, lambda run_id: outbox.put(("started", run_id)), executor,
                         handle_signals=False)
        outbox.put(("ended", (result.outcome, result.error, result.signal)))
    except (ClusterLost, ClusterUnreachable) as error:  # reachable when the search began: lost since
        outbox.put(("interrupted", str(error)))
        return False
    except RlrunError as error:
        outbox.put(("ended", ("failed", str(error), 0)))
    return True


@dataclass(frozen=True)
class Job:
    """A trial's training, as plain data (it crosses to a worker process): a new run of `spec`, the
    run `run_id` continued from its snapshots, or a new run forked from them with `overrides` (a
    population's segment: `rlrun.search.population`)."""

    number: int
    kind: str  # train | resume | fork
    spec: dict[str, Any] | None
    run_id: str | None
    trial: TrialLink | None = None
    """A new run's trial, recorded with the run (one transaction: never a run without its trial)."""
    overrides: tuple[str, ...] = ()
    """A fork's spec edit."""

    def run(self, home: Path, on_event: Callable[[events.Event], None], on_start: Callable[[str], None],
            executor: Executor, handle_signals: bool = True) -> Any:
        from rlrun.training import resume, train

        if self.kind == "resume":
            assert self.run_id is not None
            return resume(self.run_id, home=home, on_event=on_event, executor=executor, handle_signals=handle_signals)
        if self.kind == "fork":
            assert self.run_id is not None
            return resume(self.run_id, home=home, fork=True, overrides=list(self.overrides), on_event=on_event,
                          on_start=lambda run: on_start(run.id), executor=executor, handle_signals=handle_signals,
                          trial=self.trial)
        assert self.spec is not None
        return train(validate_spec(self.spec, check_env_id=False), home=home, on_event=on_event,
                     on_start=lambda run: on_start(run.id), executor=executor, handle_signals=handle_signals,
                     trial=self.trial)


def _local_executor(stop: StopRequest) -> Executor:
    from rlrun.training.local import LocalExecutor

    return LocalExecutor(stop=stop)


class _Trial:
    """One trial: suggested (or taken back from the registry), trained or continued, scored and
    perhaps pruned on its evaluations."""

    def __init__(self, driver: _Driver, registry: Registry, number: int, existing: TrialRecord | None,
                 history: list[TrialRecord]) -> None:  # fmt: skip
        self.driver, self.registry, self.number, self.existing = driver, registry, number, existing
        settings = driver.plan.settings
        self.settings = settings
        self.dimensions = driver.plan.dimensions
        self.study = _study(settings, self.dimensions, history, number, driver.plan.spec.meta.eval_frequency)
        self.distributions = _distributions(self.dimensions)
        if existing is not None:
            self.study.enqueue_trial(_encode(existing.params, self.dimensions))
        self.trial = self.study.ask(self.distributions)
        self.params = existing.params if existing is not None else _decode(self.trial.params, self.dimensions)
        self.spec = validate_spec(search_space.apply(driver.plan.spec.to_json(), self.params), check_env_id=False)
        self.row: TrialRecord | None = existing
        self.scores: dict[int, dict[int, float]] = {}
        """frame -> session index -> evaluation mean, as the sessions report them."""
        self.intermediate: list[tuple[int, float]] = []
        self.pruned_at: int | None = None
        self.stop = StopRequest()
        """Requested (PRUNE) when the pruner stops the trial; passed on to its executor, or to its worker
        process when it has one."""

    # -- running --------------------------------------------------------------------------------

    def prepare(self) -> Job | None:
        """What to train: a new run, or the trial's run continued from its snapshots (whose kept
        evaluations the pruner sees again first); None when the trial turns out to have been
        pruned already (the driver died before it could record that)."""
        from rlrun.training import plan_resume

        if self.row is None or self.row.run_id is None:
            link = TrialLink(self.driver.record.id, self.number, json.dumps(self.params))
            return Job(self.number, "train", self.spec.to_json(), None, link)
        self._replay(plan_resume(self.registry, self.driver.root, self.row.run_id))
        if self.pruned_at is not None:
            self.conclude("pruned", None, 0)
            return None
        return Job(self.number, "resume", None, self.row.run_id)

    def run(self) -> int:
        """Train or continue the trial here and record how it ended; the signal that stopped it, or 0."""
        job = self.prepare()
        if job is None:
            return 0
        try:
            result = job.run(self.driver.root, self._event, self._started, self.driver.make_executor(self.stop),
                             handle_signals=self.driver.handle_signals)
        except (ClusterLost, ClusterUnreachable) as error:  # reachable when the search began: lost since
            self.driver.interrupted = f"trial {self.number} interrupted: {error}"  # the trial stays running
            return 0
        except BadInput as error:  # these values cannot train (an env and an agent that do not fit)
            return self.conclude("failed", str(error), 0)
        return self.conclude(result.outcome, result.error, result.signal)

    def conclude(self, outcome: str, error: str | None, signal: int) -> int:
        """Record the trial's end from its run's outcome; a stop by a signal leaves it running."""
        if self.pruned_at is not None:
            return self._end("pruned", None)
        if outcome == "failed":
            return self._end("failed", error)
        if signal > 0 or outcome == "preempted":  # stopped by a signal (to the driver, or to a session)
            return signal if signal > 0 else int(SIGTERM)
        return self._end("complete", None)

    def _started(self, run_id: str) -> None:
        """The trial's new run is recorded, and with it the trial's row (new, or relinked when its
        run was deleted)."""
        self.row = self.registry.trial_of(self.driver.record.id, self.number)

    def _replay(self, plan: Any) -> None:
        """The evaluations the run kept (up to each session's snapshot), as if they came now: the
        pruner sees them again in order and decides as it did (perhaps to prune, where the driver
        died before it could record that)."""
        detail = self.registry.get_run(plan.run.id)
        limits = {s.index: (c.frame if c is not None else 0) for s, c in plan.starts}
        for evaluation in sorted(detail.evaluations, key=lambda e: (e.frame, e.session_index)):
            if evaluation.kind == "train" and evaluation.frame <= limits.get(evaluation.session_index, math.inf):
                self._scored(evaluation.session_index, evaluation.frame, evaluation.mean)
                if self.pruned_at is not None:
                    return

    def _event(self, event: events.Event) -> None:
        self.driver.on_event(event)
        if isinstance(event, events.Evaluated) and self.pruned_at is None:
            self._scored(event.index, event.frame, event.mean)

    def _scored(self, session: int, frame: int, mean: float) -> None:
        self.scores.setdefault(frame, {})[session] = mean
        if len(self.scores[frame]) < self.spec.meta.sessions or any(f == frame for f, _ in self.intermediate):
            return
        value = self._value_at(frame)
        self.intermediate.append((frame, value))
        self.trial.report(value, frame)
        prune = (self.settings.pruner != "none" and frame < self.spec.meta.max_frame and self.trial.should_prune())
        assert self.row is not None
        self.registry.record_trial(self.row.id, intermediate_json=json.dumps(self.intermediate),
                                   system_attrs_json=json.dumps(self._system_attrs()))
        if prune:
            self.pruned_at = frame
            self.stop.request(PRUNE)

    def _value_at(self, frame: int) -> float:
        """The trial's score at `frame`: over sessions, the mean of each one's evaluation there
        (eval_mean) or of its best so far (best_eval)."""
        if self.settings.metric == "eval_mean":
            values = list(self.scores[frame].values())
        else:
            values = [max(by_session[s] for f, by_session in self.scores.items() if f <= frame and s in by_session)
                      for s in self.scores[frame]]
        return sum(values) / len(values)

    def _system_attrs(self) -> dict[str, Any]:
        frozen = self.study.get_trials(deepcopy=False)[self.trial.number]
        return {k: v for k, v in frozen.system_attrs.items() if not k.startswith("fixed_params")}

    def _end(self, state: str, error: str | None) -> int:
        if self.row is None:  # refused before its run was recorded
            self.row = self.registry.add_trial(self.driver.record.id, number=self.number, run_id=None,
                                               params_json=json.dumps(self.params))
        value = self.intermediate[-1][1] if state == "complete" and self.intermediate else None
        note = error
        if state == "pruned" and self.pruned_at is not None:
            score = self.intermediate[-1][1]
            note = (f"pruned at frame {self.pruned_at:,}: {self.settings.metric} {score:.1f} fell below the"
                    f" {self.settings.pruner} pruner's bar")
        self.registry.record_trial(self.row.id, intermediate_json=json.dumps(self.intermediate),
                                   system_attrs_json=json.dumps(self._system_attrs()), state=state, value=value,
                                   note=note)
        self.driver.on_trial(TrialOutcome(self.number, self.row.run_id, self.params, state, value, note))
        return 0


# ---------------------------------------------------------------------------------------------
# Optuna: a fresh in-memory study per suggestion


def _study(settings: Settings, dimensions: list[Dimension], history: list[TrialRecord], number: int,
           eval_frequency: int) -> optuna.Study:  # fmt: skip
    """A new in-memory study told every ended trial, whose sampler is seeded by the trial number:
    what it suggests depends on that history alone."""
    optuna = _optuna()
    from optuna.trial import TrialState

    seed = seeding.derive(settings.seed, SAMPLER_STREAM, number)
    sampler: Any
    if settings.sampler == "grid":
        # One seed for every trial: it orders the grid, and the trials' grid ids index that order.
        sampler = optuna.samplers.GridSampler({d.path: [json.dumps(v) for v in d.values] for d in dimensions},
                                              seed=seeding.derive(settings.seed, SAMPLER_STREAM))
    elif settings.sampler == "random":
        sampler = optuna.samplers.RandomSampler(seed=seed)
    else:
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=settings.random_trials)
    study = optuna.create_study(direction="maximize", sampler=sampler, pruner=_pruner(settings, eval_frequency))
    states = {"complete": TrialState.COMPLETE, "pruned": TrialState.PRUNED, "failed": TrialState.FAIL}
    distributions = _distributions(dimensions)
    for trial in history:
        study.add_trial(optuna.trial.create_trial(
            state=states[trial.state], value=trial.value if trial.state == "complete" else None,
            params=_encode(trial.params, dimensions), distributions=distributions,
            intermediate_values=dict(trial.intermediate), system_attrs=json.loads(trial.system_attrs_json),
        ))  # fmt: skip
    return study


def _pruner(settings: Settings, eval_frequency: int) -> Any:
    """Steps are frames. The median pruner compares a trial's score with the median of the earlier
    trials' at the same frame; successive halving keeps the best third at the first evaluation, at
    three times its frame, nine times, … (a fixed first rung, so no rung depends on which trial
    happened to end first)."""
    optuna = _optuna()
    if settings.pruner == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=settings.prune_after)
    if settings.pruner == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=eval_frequency, reduction_factor=3)
    return optuna.pruners.NopPruner()


def _distributions(dimensions: list[Dimension]) -> dict[str, Any]:
    """Optuna's distributions. A choice's values go in as JSON text, so any JSON value (a list of
    layer widths) can be a choice."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    made: dict[str, Any] = {}
    for d in dimensions:
        if d.kind in search_space.LISTS:
            made[d.path] = CategoricalDistribution([json.dumps(v) for v in d.values])
        elif d.kind == "randint":
            made[d.path] = IntDistribution(int(d.values[0]), int(d.values[1]))
        else:
            made[d.path] = FloatDistribution(float(d.values[0]), float(d.values[1]), log=d.kind == "loguniform")
    return made


def _encode(params: dict[str, Any], dimensions: list[Dimension]) -> dict[str, Any]:
    lists = {d.path for d in dimensions if d.kind in search_space.LISTS}
    return {path: json.dumps(value) if path in lists else value for path, value in params.items()}


def _decode(params: dict[str, Any], dimensions: list[Dimension]) -> dict[str, Any]:
    lists = {d.path for d in dimensions if d.kind in search_space.LISTS}
    return {d.path: json.loads(params[d.path]) if d.path in lists else params[d.path] for d in dimensions}


def importance(detail: Any) -> dict[str, float] | None:
    """Each parameter's share of the score's variance over the complete trials (Optuna's fANOVA),
    or None when there are too few of them or Optuna is missing."""
    complete = [t for t in detail.trials if t.state == "complete" and t.value is not None]
    dimensions = search_space.load(detail.search.space_json)
    if len(complete) < 2 or len(dimensions) < 1:
        return None
    try:
        optuna = _optuna()
    except BadInput:
        return None
    study = optuna.create_study(direction="maximize")
    distributions = _distributions(dimensions)
    for trial in complete:
        study.add_trial(optuna.trial.create_trial(value=trial.value, params=_encode(trial.params, dimensions),
                                                  distributions=distributions))
    try:
        return dict(optuna.importance.get_param_importances(study))
    except (RuntimeError, ValueError):
        return None
