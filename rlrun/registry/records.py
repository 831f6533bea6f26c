"""What the registry hands out: immutable records, the statuses they may hold, and the column
lists that turn a selected row into a record as it is.

The tables themselves are declared once, in `rlrun.registry.tables` (SQLAlchemy, for Alembic);
a test (tests/unit/test_registry_rules.py) holds the records and column lists here to them, so
the fast read path needs no SQLAlchemy to know its columns.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from rlrun.refs import STATUSES

# Stored statuses. "crashed" is never stored: reads report a "running" (or "pending") row as
# crashed when its process is gone (see rlrun.registry.liveness), so a killed process needs
# nobody to record it.
CRASHED = "crashed"
RUN_STATUSES = tuple(s for s in STATUSES if s != CRASHED)
SESSION_STATUSES = ("pending", "running", "finished", "failed", "preempted")
# What `list_runs(status=...)` and `count_runs(status)` accept, as reported on read.
LISTED_RUN_STATUSES = STATUSES
ENDED = ("finished", "failed", "preempted")

# Attempts: every process that works on a session (the first training, each resume or fork).
# "retry": started by the cluster executor on its own after an attempt was lost (a node or worker
# died, or a worker was asked to stop by its node), not by a person. "requeue": a SLURM job that
# SLURM (or submitit, after the job's signal) put back in the queue continued its session.
ATTEMPT_KINDS = ("train", "resume", "fork", "retry", "requeue")
ATTEMPT_END_STATUSES = (*ENDED, CRASHED)  # crashed: closed by a later attempt that found it open

# Searches and their trials (`rlrun search`). A search's "crashed", like a run's, is computed on
# read (its driver stopped heartbeating), never stored. "interrupted": the cluster its trial ran on
# was lost; the trial's run kept its snapshots, and `rlrun resume search:...` continues it.
SEARCH_STATUSES = ("running", "finished", "failed", "preempted", "interrupted")
TRIAL_STATES = ("running", "complete", "pruned", "failed")

IN_LIMIT = 500  # beyond this many ids, select by a condition rather than an IN list


# --------------------------------------------------------------------------------------------
# Records returned to callers: immutable named tuples whose fields are the tables' columns in the
# tables' order, so a row selected with the matching column list below becomes a record as it is.
# (Named tuples rather than dataclasses: a dozen dataclasses take longer to create than a whole
# `rlrun ls` may spend on the registry.) `to_json()` gives plain JSON types, for `--json`.


class RunRecord(NamedTuple):
    id: str
    name: str | None
    spec_name: str
    algorithm: str
    env_id: str
    status: str
    max_frame: int
    num_sessions: int
    seed: int
    parent_id: str | None
    host: str | None
    pid: int | None
    error: str | None
    created_at: float
    finished_at: float | None
    supervisor: str | None = None
    """The cluster actor that supervises a detached run, as `rlrun show` names it (None: the
    command that started the run supervises it)."""
    stop_requested_at: float | None = None
    """When `rlrun stop` asked the run to stop (None: nobody has since it last started)."""
    home: str | None = None
    """Where the run's folder lives: its home's URL (`s3://bucket/prefix`) or absolute folder
    (`paths.home_address`); None for a run recorded before rlrun kept it: the registry's own home."""
    slurm_jobs: str | None = None
    """The SLURM jobs that run its sessions, comma-separated in session order (`--slurm`; None: the
    run does not run on SLURM)."""
    origin: str | None = None
    """Where it was trained: None by rlrun; `sb3`, a foreign run imported from an SB3 / RL Zoo log
    folder (`rlrun import sb3`): its evaluations only, read-only (`rlrun.imports.foreign`)."""

    def to_json(self) -> dict[str, Any]:
        return self._asdict()


class SessionRecord(NamedTuple):
    id: int
    run_id: str
    index: int  # type: ignore[assignment]  # the session's number, shadowing tuple.index on purpose
    seed: int
    status: str
    frame: int
    episode: int
    opt_step: int
    best_eval: float | None
    last_eval: float | None
    host: str | None
    pid: int | None
    heartbeat_at: float | None
    started_at: float | None
    finished_at: float | None
    error: str | None
    lease: int = 0
    """The session's fencing token: the number of attempts that have taken it over."""

    def to_json(self) -> dict[str, Any]:
        return self._asdict()


class CheckpointRecord(NamedTuple):
    id: int
    session_id: int
    run_id: str
    session_index: int
    frame: int
    kind: str
    path: str
    sha256: str
    size_bytes: int
    created_at: float

    def to_json(self) -> dict[str, Any]:
        return self._asdict()


class EvaluationRecord(NamedTuple):
    id: int
    session_id: int
    run_id: str
    session_index: int
    frame: int
    kind: str
    mean: float
    std: float
    min: float
    max: float
    episodes: int
    created_at: float

    def to_json(self) -> dict[str, Any]:
        return self._asdict()


class SpecRevisionRecord(NamedTuple):
    id: int
    run_id: str
    revision: int
    frame: int
    spec_json: str
    diff_json: str | None
    created_at: float

    def to_json(self) -> dict[str, Any]:
        """The spec and diff as JSON values rather than strings holding JSON."""
        data = self._asdict()
        data["spec"] = json.loads(data.pop("spec_json"))
        diff = data.pop("diff_json")
        data["diff"] = None if diff is None else json.loads(diff)
        return data


class AttemptRecord(NamedTuple):
    id: int
    run_id: str
    session_id: int
    session_index: int
    kind: str
    host: str | None
    pid: int | None
    start_frame: int
    started_at: float
    ended_at: float | None
    end_status: str | None
    approximate: bool
    note: str | None
    node: str | None = None
    """The cluster node it ran on (Ray's node id), None outside a cluster."""
    lease: int | None = None
    """The session's lease token it held (None before leases existed)."""

    def to_json(self) -> dict[str, Any]:
        return self._asdict()


class SearchRecord(NamedTuple):
    id: str
    name: str | None
    spec_name: str
    spec_json: str
    space_json: str
    settings_json: str
    status: str
    host: str | None
    pid: int | None
    error: str | None
    importance_json: str | None
    created_at: float
    finished_at: float | None
    heartbeat_at: float | None = None
    """The driver's last sign of life, on the database's clock (`liveness.Liveness.search_of`)."""
    stop_requested_at: float | None = None
    """When `rlrun stop search:` asked the search to stop (the database's clock); None: nobody did."""
    driver: str | None = None
    """The cluster actor that drives the search (`--detach`, as `runs.supervisor` names a run's);
    None: the command that started or resumed it drives it."""

    def to_json(self) -> dict[str, Any]:
        """The spec, space, settings and importance as JSON values rather than strings holding JSON."""
        data = self._asdict()
        for key in ("spec", "space", "settings", "importance"):
            text = data.pop(f"{key}_json")
            data[key] = None if text is None else json.loads(text)
        return data


class TrialRecord(NamedTuple):
    id: int
    search_id: str
    number: int
    run_id: str | None
    params_json: str
    state: str
    value: float | None
    intermediate_json: str
    system_attrs_json: str
    note: str | None
    created_at: float
    finished_at: float | None

    @property
    def params(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.params_json)
        return result

    @property
    def intermediate(self) -> list[tuple[int, float]]:
        """(frame, value) pairs, oldest first: the trial's score at each evaluation."""
        return [(int(frame), float(value)) for frame, value in json.loads(self.intermediate_json)]

    def to_json(self) -> dict[str, Any]:
        data = self._asdict()
        data["params"] = json.loads(data.pop("params_json"))
        data["intermediate"] = json.loads(data.pop("intermediate_json"))
        data["system_attrs"] = json.loads(data.pop("system_attrs_json"))
        return data


class TrialLink(NamedTuple):
    """The search trial a new run trains: recorded with the run, in the same transaction, so no
    run of a search is ever left without its trial (`Writes.create_run`)."""

    search_id: str
    number: int
    params_json: str


class LineageRecord(NamedTuple):
    """A population-based training segment's place in its population (see `tables.LineageRow`)."""

    trial_id: int
    search_id: str
    member: int
    generation: int
    parent_member: int | None
    parent_run_id: str | None
    frame: int
    mutated_json: str

    @property
    def mutated(self) -> list[str]:
        result: list[str] = json.loads(self.mutated_json)
        return result

    def to_json(self) -> dict[str, Any]:
        data = self._asdict()
        data["mutated"] = json.loads(data.pop("mutated_json"))
        return data


class SearchDetail(NamedTuple):
    search: SearchRecord  # its status as reported (crashed when its driver is gone)
    trials: list[TrialRecord]  # by number

    def to_json(self) -> dict[str, Any]:
        return {"search": self.search.to_json(), "trials": [t.to_json() for t in self.trials]}


class RunSummary(NamedTuple):
    row: int  # 1-based position in `rlrun ls` order under the same filters
    id: str
    name: str | None
    spec_name: str
    algorithm: str
    env_id: str
    status: str
    num_sessions: int
    frames_done: int
    frames_target: int
    best_eval: float | None
    created_at: float
    finished_at: float | None
    session_frame: int = 0
    """The slowest session's progress: the further of its last heartbeat's frame and its newest
    complete snapshot's. `ls` shows it against the per-session target (`max_frame`)."""
    training_seconds: float | None = None
    """Time spent training: its busiest session's attempts, start to end (an open one to now), so
    idle time between a stop and a resume does not count. None before any attempt."""
    home: str | None = None
    """The home the run lives in: its URL (`s3://bucket/prefix`) or folder (`RunRecord.home`; the
    registry's own home for a run recorded before rlrun kept it)."""
    slurm_jobs: str | None = None
    """The SLURM jobs that run its sessions (`RunRecord.slurm_jobs`; None: not on SLURM)."""
    origin: str | None = None
    """Where it was trained (`RunRecord.origin`; None: by rlrun)."""
    offline_updates: int = 0
    """Gradient steps on a dataset before the env is stepped, each a frame of the clock (the newest
    spec's `meta.offline_updates`, filled in by `rlrun.catalog.list_runs`; 0: none)."""

    @property
    def phase(self) -> str | None:
        """ "offline" while the slowest session learns from the dataset, "online" after; None for a
        run that learns from no dataset."""
        if not self.offline_updates:
            return None
        return "offline" if self.session_frame < self.offline_updates else "online"

    def to_json(self) -> dict[str, Any]:
        return {**self._asdict(), "phase": self.phase}


class RunDetail(NamedTuple):
    run: RunRecord
    sessions: list[SessionRecord]
    checkpoints: list[CheckpointRecord]
    evaluations: list[EvaluationRecord]
    spec_revisions: list[SpecRevisionRecord]
    attempts: list[AttemptRecord]  # oldest first
    forks: list[str]  # ids of the runs forked from this one

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run.to_json(),
            "sessions": [s.to_json() for s in self.sessions],
            "checkpoints": [c.to_json() for c in self.checkpoints],
            "evaluations": [e.to_json() for e in self.evaluations],
            "spec_revisions": [r.to_json() for r in self.spec_revisions],
            "attempts": [a.to_json() for a in self.attempts],
            "forks": list(self.forks),
        }


# Column lists in record order (the *_SELECT strings name each table by its alias: r, s, c, e, v,
# a). Sessions call their index column session_index.
RUN_COLUMNS = (
    "id",
    "name",
    "spec_name",
    "algorithm",
    "env_id",
    "status",
    "max_frame",
    "num_sessions",
    "seed",
    "parent_id",
    "host",
    "pid",
    "error",
    "created_at",
    "finished_at",
    "supervisor",
    "stop_requested_at",
    "home",
    "slurm_jobs",
    "origin",
)
SESSION_COLUMNS = (
    "id",
    "run_id",
    "session_index",
    "seed",
    "status",
    "frame",
    "episode",
    "opt_step",
    "best_eval",
    "last_eval",
    "host",
    "pid",
    "heartbeat_at",
    "started_at",
    "finished_at",
    "error",
    "lease",
)
RUN_SELECT = ", ".join(f"r.{c}" for c in RUN_COLUMNS)
SESSION_SELECT = ", ".join(f"s.{c}" for c in SESSION_COLUMNS)
CHECKPOINT_SELECT = (
    "c.id, c.session_id, s.run_id, s.session_index, c.frame, c.kind, c.path, c.sha256, c.size_bytes, c.created_at"
)
EVALUATION_SELECT = (
    "e.id, e.session_id, s.run_id, s.session_index, e.frame, e.kind, e.mean, e.std, e.min, e.max, e.episodes,"
    " e.created_at"
)
REVISION_SELECT = "v.id, v.run_id, v.revision, v.frame, v.spec_json, v.diff_json, v.created_at"
ATTEMPT_SELECT = (
    "a.id, a.run_id, a.session_id, s.session_index, a.kind, a.host, a.pid, a.start_frame, a.started_at,"
    " a.ended_at, a.end_status, a.approximate, a.note, a.node, a.lease"
)
NEWEST_FIRST = "r.created_at DESC, r.id DESC"
SEARCH_COLUMNS = (
    "id",
    "name",
    "spec_name",
    "spec_json",
    "space_json",
    "settings_json",
    "status",
    "host",
    "pid",
    "error",
    "importance_json",
    "created_at",
    "finished_at",
    "heartbeat_at",
    "stop_requested_at",
    "driver",
)
TRIAL_COLUMNS = (
    "id",
    "search_id",
    "number",
    "run_id",
    "params_json",
    "state",
    "value",
    "intermediate_json",
    "system_attrs_json",
    "note",
    "created_at",
    "finished_at",
)
LINEAGE_COLUMNS = (
    "trial_id",
    "search_id",
    "member",
    "generation",
    "parent_member",
    "parent_run_id",
    "frame",
    "mutated_json",
)
LINEAGE_SELECT = ", ".join(f"l.{c}" for c in LINEAGE_COLUMNS)
SEARCH_SELECT = ", ".join(f"q.{c}" for c in SEARCH_COLUMNS)
TRIAL_SELECT = ", ".join(f"t.{c}" for c in TRIAL_COLUMNS)


def attempt_record(row: tuple[Any, ...]) -> AttemptRecord:
    record = AttemptRecord(*row)
    return record._replace(approximate=bool(record.approximate))  # SQLite keeps booleans as 0 and 1


def insert_sql(table: str, columns: Iterable[str]) -> str:
    names = list(columns)
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join(':' + n for n in names)})"


def in_list(prefix: str, values: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """`:p0, :p1, ...` and their values, for an IN (...) list."""
    params = {f"{prefix}{i}": value for i, value in enumerate(values)}
    return ", ".join(f":{name}" for name in params), params


class RestoredRun(NamedTuple):
    """A run read back from its folder, ready for `Registry.restore_run`: the run's record (its
    stored status) and its rows as column values, children keyed by session_index."""

    run: RunRecord
    sessions: list[dict[str, Any]]
    spec_revisions: list[dict[str, Any]]
    attempts: list[dict[str, Any]]
    checkpoints: list[dict[str, Any]]
    evaluations: list[dict[str, Any]]
    trial: dict[str, Any] | None = None
    """The search trial the run trained, as its manifest names it ({"search_id", "number", "params"})."""
