"""Population-based training (`rlrun search SPEC --scheduler pbt`): the plan and the driver; the
decisions are `rlrun.search.pbt`'s.

Every member trains in segments of `interval` frames, and every segment is a run of its own,
linked to the search as a trial (so `rlrun ls --search` lists them) and to its place in the
population by a `lineage` row (member, generation, the member and run it continues, the frame,
the values it explored). A member's first segment is a new run; each later one is an exact fork
(`rlrun.training.resume(..., fork=True)`) of the previous segment of the member it continues:
its own, or, when it lost, a winner's. A fork carries the whole state of that snapshot (weights,
optimiser, clock, every generator, the env's state, the replay memory by hard link), so the only
difference exploit makes is the explored values, written as step schedules (`pbt.switch_after`)
that are consistent edits of the snapshot's past.

Deterministic given the seed: a decision reads only the search's seed and the scores recorded
for the previous generation, and is recorded (trial and lineage, one transaction) before its run
starts. A driver killed at any moment and resumed (`rlrun resume search:REF`) finds each segment
done, or recorded and continued from its run's own snapshots, or recorded and not yet started (a
fork killed before its first snapshot is forked again), and so ends as the uninterrupted search.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from signal import SIGTERM
from typing import Any

from rlrun.errors import BadInput, ClusterLost, ClusterUnreachable
from rlrun.registry import Registry
from rlrun.registry.records import LineageRecord, TrialLink, TrialRecord
from rlrun.search import pbt
from rlrun.search import space as search_space
from rlrun.search.driver import Driver
from rlrun.search.outcomes import TrialOutcome
from rlrun.search.settings import SearchPlan, Settings
from rlrun.search.trial import Job, WorkerExecutors, train_trial
from rlrun.search.trials_plan import plan_trials
from rlrun.session.stopping import StopRequest
from rlrun.sizes import parse_size
from rlrun.spec import validate_spec

SCHEDULER = "pbt"


@dataclass(frozen=True)
class PbtSettings(Settings):
    """A plain search's settings (trials = population x generations; no sampler, no pruner) and
    PBT's own; stored with the search, so a resume decides the same."""

    scheduler: str = SCHEDULER
    population: int = 2
    interval: int = 1
    max_frame: int = 1
    """Each member's frame budget."""
    quantile: float = pbt.QUANTILE
    resample_probability: float = pbt.RESAMPLE_PROBABILITY
    factors: tuple[float, ...] = pbt.FACTORS

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> PbtSettings:
        return cls(**{**document, "factors": tuple(document["factors"])})

    @property
    def generations(self) -> int:
        return pbt.generations(self.max_frame, self.interval)

    def segment_end(self, generation: int) -> int:
        return pbt.segment_end(generation, self.interval, self.max_frame)


# ---------------------------------------------------------------------------------------------
# Planning


def plan_population(
    source: str | Path | dict[str, Any],
    overrides: list[str] | None = None,
    *,
    metric: str,
    parallel: int,
    population: int | None = None,
    interval: int | str | None = None,
    quantile: float | None = None,
    resample_probability: float | None = None,
    factors: Sequence[float] | str | None = None,
) -> SearchPlan:
    """A PBT search as `rlrun search --scheduler pbt` asks for it (`plan_pbt`), PBT's settings not
    given at `pbt.Options`' defaults."""
    if population is None or interval is None:
        raise BadInput("--scheduler pbt needs --population N and --interval FRAMES, e.g. --population 8 --interval 50k")
    given: dict[str, Any] = {
        "interval": parse_size(interval, what="--interval"),
        "quantile": quantile,
        "resample_probability": resample_probability,
        "factors": None if factors is None else _factors(factors),
    }
    options = pbt.Options(population=population, **{key: value for key, value in given.items() if value is not None})
    return plan_pbt(source, overrides, options=options, metric=metric, parallel=parallel)


def _factors(factors: Sequence[float] | str) -> tuple[float, ...]:
    """PBT's factors, as numbers or as their text (`0.8,1.2`, as the command line takes them)."""
    if not isinstance(factors, str):
        return tuple(factors)
    try:
        return tuple(float(part) for part in factors.split(","))
    except ValueError:
        raise BadInput(f"--factors {factors!r}: give numbers separated by commas, e.g. 0.8,1.2") from None


def plan_pbt(
    source: str | Path | dict[str, Any],
    overrides: list[str] | None = None,
    *,
    options: pbt.Options,
    metric: str = "eval_mean",
    parallel: int = 1,
) -> SearchPlan:
    """A PBT search of a spec with a `search` block, training up to `parallel` members of a
    generation at once; BadInput (or SpecError) before anything is written when it cannot run:
    among others, a searched setting that cannot change mid-run."""
    base = plan_trials(source, overrides, trials=1, metric=metric, sampler="random", pruner="none", parallel=parallel)
    from rlrun.spec.consistency import flatten
    from rlrun.spec.schedules import _ScheduleBase

    max_frame = base.spec.meta.max_frame
    spec = validate_spec(pbt.pin_max_frame(base.spec.to_json(), max_frame), check_env_id=False)
    schedules = {path for path, value in flatten(spec).items() if isinstance(value, _ScheduleBase)}
    problems = options.problems(max_frame) + pbt.mutation_problems(base.dimensions, schedules)
    if problems:
        raise BadInput("; ".join(problems))
    settings = PbtSettings(
        trials=options.population * pbt.generations(max_frame, options.interval),
        metric=metric,
        sampler=SCHEDULER,
        pruner="none",
        seed=spec.meta.seed,
        parallel=parallel,
        population=options.population,
        interval=options.interval,
        max_frame=max_frame,
        quantile=options.quantile,
        resample_probability=options.resample_probability,
        factors=tuple(options.factors),
    )
    return SearchPlan(spec, base.dimensions, settings, base.space)


# ---------------------------------------------------------------------------------------------
# The driver


class PbtDriver(Driver):
    """The search driver (records, status, signals: `rlrun.search.driver.Driver`) with generations of
    segments in place of trials: one segment at a time, or (`parallel` > 1) up to that many of a
    generation at once, each in a worker process of its own, the whole generation awaited before
    the next is decided."""

    def _one_at_a_time(self, registry: Registry) -> int:
        settings = self.plan.settings
        assert isinstance(settings, PbtSettings)
        for generation in range(settings.generations):
            for member in range(settings.population):
                if self._stop_signal():
                    return self._stop_signal()
                signal = _Segment(self, registry, settings, generation, member).run()
                if signal or self.error is not None or self.interrupted is not None:
                    return signal
        return self._stop_signal()

    def _several_at_once(self, registry: Registry) -> int:
        settings = self.plan.settings
        assert isinstance(settings, PbtSettings)
        for generation in range(settings.generations):
            if self._stop_signal():
                return self._stop_signal()
            signal = self._generation_at_once(registry, settings, generation)
            if signal or self.error is not None or self.interrupted is not None:  # no next generation
                return signal
        return self._stop_signal()

    def _generation_at_once(self, registry: Registry, settings: PbtSettings, generation: int) -> int:
        """A generation's segments in `parallel` worker processes (the parallel trials' supervisor
        and worker), each training its share of them one after another: a process and its imports
        per lane, not per segment. Every segment is decided and recorded here first, from the
        previous generation alone, and each is scored on its own run when it ends: which one ends
        first changes nothing recorded. A segment stopped by a signal or a lost worker stays
        running, for `rlrun resume search:...` to continue from its run's snapshots."""
        from rlrun.training.supervisor import Supervisor, Work

        segments: dict[int, _Segment] = {}
        jobs: list[Job] = []
        for member in range(settings.population):
            segment = _Segment(self, registry, settings, generation, member)
            job = segment.prepare()
            if self.error is not None:
                return 0
            if job is not None:
                segments[job.number] = segment
                jobs.append(job)
        lanes = [tuple(jobs[lane :: settings.parallel]) for lane in range(min(settings.parallel, len(jobs)))]
        ended: set[int] = set()
        signals: list[int] = []

        def deliver(lane: int, message: tuple[str, Any]) -> bool:
            kind, payload = message
            if kind == "segment":
                number, (what, detail) = payload
                if what == "event":
                    self.on_event(detail)
                elif what == "ended":
                    signals.append(segments[number].conclude(*detail))
                    ended.add(number)
                    self._stop_all_once_stopped(supervisor, signals[-1])
                elif what == "interrupted":  # its cluster was lost: the segment stays running
                    self.interrupted = segments[number].interruption(detail)
                    ended.add(number)
            return kind == "done"

        def lost(lane: int, exitcode: int | None) -> None:
            member = next(job.number for job in lanes[lane] if job.number not in ended) % settings.population
            self.error = f"member {member}'s worker process exited with code {exitcode} in generation {generation}"

        supervisor = Supervisor(deliver, lost, at_most=settings.parallel)
        work = (
            Work(
                lane,
                _train_lane,
                (share, str(self.root), self.worker_executors),
                name=f"rlrun-g{generation}l{lane}",
            )
            for lane, share in enumerate(lanes)
            if not supervisor.stop.signal
        )
        return supervisor.run(work) or max(signals, default=0)


def _train_lane(
    jobs: tuple[Job, ...], home: str, executors: WorkerExecutors | None, outbox: Any, shared_stop: Any
) -> None:
    """A worker process: train its segments one after another, each as a parallel trial's worker
    trains its trial, their messages tagged with their trial numbers; none more once stopped, or
    once the cluster was lost."""
    for job in jobs:
        if StopRequest(shared_stop).signal:
            break
        if not train_trial(job, home, executors, _Tagged(outbox, job.number), shared_stop):
            break
    outbox.put(("done", None))


class _Tagged:
    def __init__(self, outbox: Any, number: int) -> None:
        self.outbox, self.number = outbox, number

    def put(self, message: tuple[str, Any]) -> None:
        self.outbox.put(("segment", (self.number, message)))


class _Segment:
    """One member's segment of one generation: decided (or taken back from the registry), trained
    or continued, and scored on its run's final evaluation."""

    def __init__(
        self, driver: PbtDriver, registry: Registry, settings: PbtSettings, generation: int, member: int
    ) -> None:
        self.driver, self.registry, self.settings = driver, registry, settings
        self.generation, self.member = generation, member
        self.number = generation * settings.population + member

    def run(self) -> int:
        """Train the segment here; the signal that stopped it, or 0."""
        job = self.prepare()
        if job is None:
            return 0
        executor = self.driver.make_executor(StopRequest())
        try:
            result = job.run(
                self.driver.root,
                self.driver.on_event,
                lambda run_id: None,
                executor,
                handle_signals=self.driver.handle_signals,
            )
        except (ClusterLost, ClusterUnreachable) as error:  # reachable when the search began: lost since
            self.driver.interrupted = self.interruption(error)  # the segment stays running
            return 0
        return self.conclude(result.outcome, result.error, result.signal)

    def interruption(self, error: object) -> str:
        """Why the population stopped short when its cluster was lost under this segment."""
        return f"member {self.member} interrupted in generation {self.generation}: {error}"

    def prepare(self) -> Job | None:
        """What the segment trains: its run continued, a new first segment or a new fork; None
        when it has ended already, or cannot be decided (the driver's error says why)."""
        search_id = self.driver.record.id
        trials = {t.number: t for t in self.registry.get_search(search_id).trials}
        row = trials.get(self.number)
        if row is not None and row.state != "running":
            return None
        if row is None:
            row = self._decide(trials)
            if row is None:
                return None
        line = next(line for line in self.registry.get_lineage(search_id) if line.trial_id == row.id)
        if row.run_id is not None and self._continuable(row.run_id, line):
            return Job(self.number, "resume", None, row.run_id)
        # The run and its link to the segment's trial are one transaction: no kill leaves a run unlinked.
        link = TrialLink(search_id=row.search_id, number=row.number, params_json=row.params_json)
        if line.generation == 0:
            return Job(self.number, "train", self._first_spec(row.params).to_json(), None, link)
        return Job(self.number, "fork", None, line.parent_run_id, link, tuple(self._edit(row, line)))

    def conclude(self, outcome: str, error: str | None, signal: int) -> int:
        """Record the segment's end from its run's outcome (its run read back from the registry:
        the run was recorded with the trial); a stop by a signal leaves it running."""
        row = self.registry.trial_of(self.driver.record.id, self.number)
        if outcome == "failed":
            self.driver.error = f"member {self.member} failed in generation {self.generation}: {error}"
            return self._end(row, "failed", None, error)
        if signal > 0 or outcome == "preempted":
            return signal if signal > 0 else int(SIGTERM)
        assert row.run_id is not None
        return self._end(row, "complete", self._score(row.run_id), None)

    # -- deciding -------------------------------------------------------------------------------

    def _decide(self, trials: dict[int, TrialRecord]) -> TrialRecord | None:
        """Decide the segment from the seed and the previous generation's scores, and record it
        (trial and lineage together) before anything trains."""
        settings, dimensions = self.settings, self.driver.plan.dimensions
        if self.generation == 0:
            params = pbt.initial_params(dimensions, settings.seed, self.member)
            decision = pbt.Decision(self.member, self.member, params)
            parent_run, frame = None, 0
        else:
            previous = [trials[(self.generation - 1) * settings.population + m] for m in range(settings.population)]
            decision = pbt.decide(
                dimensions,
                seed=settings.seed,
                generation=self.generation,
                scores=[t.value if t.state == "complete" else None for t in previous],
                params=[t.params for t in previous],
                quantile=settings.quantile,
                resample_probability=settings.resample_probability,
                factors=settings.factors,
            )[self.member]
            parent_run = previous[decision.source].run_id
            if parent_run is None:
                self.driver.error = (
                    f"member {decision.source}'s generation {self.generation - 1} has no run to"
                    f" continue (it failed before training)"
                )
                return None
            frame = max(c.frame for c in self.registry.get_run(parent_run).checkpoints)
        return self.registry.add_segment(
            self.driver.record.id,
            number=self.number,
            params_json=json.dumps(decision.params),
            member=self.member,
            generation=self.generation,
            parent_member=None if self.generation == 0 else decision.source,
            parent_run_id=parent_run,
            frame=frame,
            mutated_json=json.dumps(list(decision.mutated)),
        )

    # -- training -------------------------------------------------------------------------------

    def _continuable(self, run_id: str, line: LineageRecord) -> bool:
        """Whether the segment's run continues from its own snapshots: always for a first segment
        (from frame 0 if it has none: the same start), for a fork only when every session has one
        of its own; otherwise the fork is made again and this run, which never saved, removed."""
        if line.generation == 0:
            return True
        detail = self.registry.get_run(run_id)
        if {c.session_index for c in detail.checkpoints} >= {s.index for s in detail.sessions}:
            return True
        from rlrun.home.maintenance import remove_runs

        remove_runs(self.registry, [detail.run])
        return False

    def _first_spec(self, params: dict[str, Any]) -> Any:
        """The member's first segment: the base spec with its values, its own seeds (members differ
        in seed as sessions do) and the first interval as its budget."""
        spec = self.driver.plan.spec
        document = search_space.apply(spec.to_json(), params)
        document["meta"]["max_frame"] = self.settings.segment_end(0)
        document["meta"]["seed"] = spec.meta.seed + self.member * spec.meta.sessions
        return validate_spec(document, check_env_id=False)

    def _edit(self, row: TrialRecord, line: LineageRecord) -> list[str]:
        """The fork's spec edit: the next budget, and each explored value switched after the fork's
        frame in the parent's schedule (so the edit is consistent with the parent's past)."""
        assert line.parent_run_id is not None
        parent = json.loads(self.registry.latest_spec(line.parent_run_id).spec_json)
        edit = [f"meta.max_frame={self.settings.segment_end(self.generation)}"]
        for path in line.mutated:
            switched = pbt.switch_after(_at(parent, path), line.frame, row.params[path])
            edit.append(f"{path}={json.dumps(switched)}")
        return edit

    # -- scoring --------------------------------------------------------------------------------

    def _score(self, run_id: str) -> float | None:
        """The segment's score: over its sessions, the evaluation at its end (eval_mean) or each
        one's best so far (best_eval, which a fork carries from its parent's snapshot)."""
        detail = self.registry.get_run(run_id)
        if self.settings.metric == "best_eval":
            values = [s.best_eval for s in detail.sessions if s.best_eval is not None]
        else:
            last: dict[int, tuple[int, float]] = {}
            for e in detail.evaluations:
                if e.kind == "train" and e.frame >= last.get(e.session_index, (-1, 0.0))[0]:
                    last[e.session_index] = (e.frame, e.mean)
            values = [mean for _, mean in last.values()]
        return sum(values) / len(values) if values else None

    def _end(self, row: TrialRecord, state: str, value: float | None, note: str | None) -> int:
        frame = self.settings.segment_end(self.generation)
        intermediate = [] if value is None or math.isnan(value) else [[frame, value]]
        self.registry.record_trial(
            row.id,
            intermediate_json=json.dumps(intermediate),
            system_attrs_json="{}",
            state=state,
            value=value,
            note=note,
        )
        self.driver.on_trial(TrialOutcome(self.number, row.run_id, row.params, state, value, note))
        return 0


def _at(document: dict[str, Any], path: str) -> Any:
    node: Any = document
    for key in path.split("."):
        node = node[key]
    return node
