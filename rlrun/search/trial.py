"""One trial of a search: suggested (or taken back from the registry), trained or continued as a
run (`Job`), scored and perhaps pruned on its evaluations (`Trial`); and the worker process that
trains a trial when several train at once (`trial_worker`)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from signal import SIGTERM
from typing import TYPE_CHECKING, Any, Protocol

from rlrun.catalog.scores import score as format_score
from rlrun.errors import BadInput, ClusterLost, ClusterUnreachable
from rlrun.registry import Registry
from rlrun.registry.records import SearchRecord, TrialLink, TrialRecord
from rlrun.search import space as search_space
from rlrun.search.optuna_adapter import decode_params, encode_params, new_study, optuna_distributions
from rlrun.search.outcomes import OnTrial, TrialOutcome
from rlrun.search.settings import SearchPlan
from rlrun.session import events, stopping
from rlrun.session.stopping import StopRequest
from rlrun.spec import validate_spec

if TYPE_CHECKING:
    from rlrun.training.executor import Executor


PRUNE = -1
"""What a search asks of a trial's sessions when it prunes it: stop, as after a signal (not one)."""

MakeExecutor = Callable[[StopRequest], "Executor"]


class WorkerExecutors(Protocol):
    """A `MakeExecutor` that trials trained at once may take to their worker processes: plain data
    (it is pickled), its `for_worker` copy leaving signals to the driver (`RayTrials`)."""

    def __call__(self, stop: StopRequest) -> Executor: ...

    def for_worker(self) -> WorkerExecutors: ...


class Searching(Protocol):
    """What a trial needs of its search's driver (`rlrun.search.driver.Driver`): the search, where
    its runs train and with what, and whom to tell."""

    root: Path
    record: SearchRecord
    plan: SearchPlan
    make_executor: MakeExecutor
    handle_signals: bool
    interrupted: str | None
    """Why the search stopped short of failing (its cluster was lost), set by a trial."""
    on_event: Callable[[events.Event], None]
    on_trial: OnTrial


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

    def run(
        self,
        home: Path,
        on_event: Callable[[events.Event], None],
        on_start: Callable[[str], None],
        executor: Executor,
        handle_signals: bool = True,
    ) -> Any:
        from rlrun.training import resume, train

        if self.kind == "resume":
            assert self.run_id is not None
            return resume(self.run_id, home=home, on_event=on_event, executor=executor, handle_signals=handle_signals)
        if self.kind == "fork":
            assert self.run_id is not None
            return resume(
                self.run_id,
                home=home,
                fork=True,
                overrides=list(self.overrides),
                on_event=on_event,
                on_start=lambda run: on_start(run.id),
                executor=executor,
                handle_signals=handle_signals,
                trial=self.trial,
            )
        assert self.spec is not None
        return train(
            validate_spec(self.spec, check_env_id=False),
            home=home,
            on_event=on_event,
            on_start=lambda run: on_start(run.id),
            executor=executor,
            handle_signals=handle_signals,
            trial=self.trial,
        )


def local_executor(stop: StopRequest) -> Executor:
    from rlrun.training.local import LocalExecutor

    return LocalExecutor(stop=stop)


class Trial:
    """One trial: suggested (or taken back from the registry), trained or continued, scored and
    perhaps pruned on its evaluations."""

    def __init__(
        self,
        driver: Searching,
        registry: Registry,
        number: int,
        existing: TrialRecord | None,
        history: list[TrialRecord],
    ) -> None:
        self.driver, self.registry, self.number, self.existing = driver, registry, number, existing
        settings = driver.plan.settings
        self.settings = settings
        self.dimensions = driver.plan.dimensions
        self.study = new_study(settings, self.dimensions, history, number, driver.plan.spec.meta.eval_frequency)
        self.distributions = optuna_distributions(self.dimensions)
        if existing is not None:
            self.study.enqueue_trial(encode_params(existing.params, self.dimensions))
        self.trial = self.study.ask(self.distributions)
        self.params = existing.params if existing is not None else decode_params(self.trial.params, self.dimensions)
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
            result = job.run(
                self.driver.root,
                self._event,
                self._started,
                self.driver.make_executor(self.stop),
                handle_signals=self.driver.handle_signals,
            )
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
        prune = self.settings.pruner != "none" and frame < self.spec.meta.max_frame and self.trial.should_prune()
        assert self.row is not None
        self.registry.record_trial(
            self.row.id,
            intermediate_json=json.dumps(self.intermediate),
            system_attrs_json=json.dumps(self._system_attrs()),
        )
        if prune:
            self.pruned_at = frame
            self.stop.request(PRUNE)

    def _value_at(self, frame: int) -> float:
        """The trial's score at `frame`: over sessions, the mean of each one's evaluation there
        (eval_mean) or of its best so far (best_eval)."""
        if self.settings.metric == "eval_mean":
            values = list(self.scores[frame].values())
        else:
            values = [
                max(by_session[s] for f, by_session in self.scores.items() if f <= frame and s in by_session)
                for s in self.scores[frame]
            ]
        return sum(values) / len(values)

    def _system_attrs(self) -> dict[str, Any]:
        frozen = self.study.get_trials(deepcopy=False)[self.trial.number]
        return {k: v for k, v in frozen.system_attrs.items() if not k.startswith("fixed_params")}

    def _end(self, state: str, error: str | None) -> int:
        if self.row is None:  # refused before its run was recorded
            self.row = self.registry.add_trial(
                self.driver.record.id, number=self.number, run_id=None, params_json=json.dumps(self.params)
            )
        value = self.intermediate[-1][1] if state == "complete" and self.intermediate else None
        note = error
        if state == "pruned" and self.pruned_at is not None:
            score = self.intermediate[-1][1]
            note = (
                f"pruned at frame {self.pruned_at:,}: {self.settings.metric} {format_score(score)} fell below the"
                f" {self.settings.pruner} pruner's bar"
            )
        self.registry.record_trial(
            self.row.id,
            intermediate_json=json.dumps(self.intermediate),
            system_attrs_json=json.dumps(self._system_attrs()),
            state=state,
            value=value,
            note=note,
        )
        self.driver.on_trial(TrialOutcome(self.number, self.row.run_id, self.params, state, value, note))
        return 0


def trial_worker(job: Job, home: str, executors: WorkerExecutors | None, outbox: Any, shared_stop: Any) -> None:
    """A parallel trial's worker process (`train_trial`)."""
    train_trial(job, home, executors, outbox, shared_stop)


def train_trial(job: Job, home: str, executors: WorkerExecutors | None, outbox: Any, shared_stop: Any) -> bool:
    """A worker process: train one trial, its events and end sent to the driver; its sessions here
    (`executors` None), or placed on a Ray cluster by the executor `executors` makes. Signals are
    the driver's to forward (a Ctrl-C reaches the whole process group); a worker whose driver died
    stops its trial at the next event, with a snapshot. False when the trial's cluster was lost
    (the trial stays running, for `rlrun resume search:` to continue)."""
    import signal

    from rlrun.errors import RlrunError
    from rlrun.training.local import LocalExecutor
    from rlrun.training.zygote import supervisor_gone

    for number in stopping.SIGNALS:
        signal.signal(number, signal.SIG_IGN)
    stop = StopRequest(shared_stop)

    def emit(event: events.Event) -> None:
        if supervisor_gone() and not stop.signal:
            stop.request(signal.SIGTERM)
        outbox.put(("event", event))

    executor = LocalExecutor(handle_signals=False, stop=stop) if executors is None else executors(stop)
    try:
        result = job.run(
            Path(home), emit, lambda run_id: outbox.put(("started", run_id)), executor, handle_signals=False
        )
        outbox.put(("ended", (result.outcome, result.error, result.signal)))
    except (ClusterLost, ClusterUnreachable) as error:  # reachable when the search began: lost since
        outbox.put(("interrupted", str(error)))
        return False
    except RlrunError as error:
        outbox.put(("ended", ("failed", str(error), 0)))
    return True
