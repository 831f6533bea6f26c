"""The shared PostgreSQL registry under a cluster's load (issue 11): 256 simulated sessions write
what a real session writes, at its real cadence and at 10× it, while `rlrun ls` reads alongside.

    nice python tests/benchmarks/registry_cluster_load.py [--url URL] [--pool-url URL] [--sessions 256]
        [--runs 32] [--processes 16] [--seconds 60] [--speeds 1,10] [--server-pid PID]

URL (default $RLRUN_TEST_POSTGRES) names a server and a role that may create databases: each speed
runs in a fresh database of its own, dropped afterwards. With --pool-url, the sessions and
`rlrun ls` connect through that pooler (PgBouncer in transaction mode) instead. Mind that 256
sessions straight to a server with Debian's max_connections (100) take every free connection: do
not point it at a server others are using.

What a simulated session does is what `rlrun.session.loop.Session` does, through the same `Registry`
calls, each in its own short transaction: open the registry, `add_attempt`, `start_session`; then
`heartbeat` every HEARTBEAT_SECONDS, `add_evaluation` each time the frame count crosses
`eval_frequency`, `add_checkpoint` when it crosses `checkpoint_frequency` or an evaluation is the
best so far, each followed by the retention rule (`checkpoints`, then `remove_checkpoint` for what
`rlrun.snapshot.retention.to_keep` drops); at the end a final evaluation and checkpoint, and
`finish_session`. Frames advance at `--fps` per session (5,000: a classic-control session on one
core), so the default spec's cadences (evaluation every 10k frames, snapshot every 50k) fire every
2 s and 10 s; a 10× speed divides every period by ten (sessions ten times faster, frames and
heartbeats alike). The runs (`--runs`, the sessions shared among them) are created first, as
launchers do, with `create_run`.

Connections, as on a cluster: every session opens its own `Registry` (its own engine and pool),
so the server sees one connection per session, as it would from one process per session. The
sessions run on threads inside `--processes` worker processes rather than in 256 processes
because 256 Python processes with SQLAlchemy loaded (~60 MB each) do not fit beside other work on
a small machine; the server-side load (connections, transactions, locks) is the same, and the
client-side CPU is the same work on fewer interpreters (registry calls wait on the socket, which
releases the GIL). A real cluster adds one connection per launcher (one per run) to these.

Measured: every write's latency, by kind (p50 / p99 / max); errors (any exception from a write);
rows lost (every evaluation, checkpoint, attempt and final session state a write returned for must
be in the database afterwards, and nothing the retention rule removed); `rlrun ls` (the installed
script, a subprocess, on the same RLRUN_DB, once a second) with its wall time and exit status; the
peak number of server connections to the database and of backends waiting on a lock, and the
deadlocks the server counted. Targets: 0 errors, 0 rows lost, p99 write latency ≤ 50 ms.
"""

from __future__ import annotations

import argparse
import math
import os
import queue
import random
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypedDict

from rlrun import paths
from rlrun.clock import crossed
from rlrun.registry import Registry, read_manifest
from rlrun.snapshot import retention

URL_ENV = "RLRUN_TEST_POSTGRES"


class ProgressCounts(TypedDict):  # rlrun.session.ProgressCounts, which is not imported: it loads torch
    frame: int
    episode: int
    opt_step: int


# The writes a running session makes over and over (the others: once at its start or end).
STEADY_KINDS = ("heartbeat", "evaluation", "checkpoint", "retention read", "remove checkpoint")
WRITE_KINDS = (
    "open",
    "attempt",
    "start",
    "heartbeat",
    "evaluation",
    "checkpoint",
    "retention read",
    "remove checkpoint",
    "finish",
)
TARGET_P99_MS = 50.0


# ---- cadences ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cadence:
    """When a session writes: heartbeats by wall time, evaluations and snapshots by frames."""

    heartbeat_seconds: float
    fps: float
    eval_frequency: int
    checkpoint_frequency: int
    keep_checkpoints: int

    def faster(self, factor: float) -> Cadence:
        return replace(self, heartbeat_seconds=self.heartbeat_seconds / factor, fps=self.fps * factor)


def real_cadence(fps: float) -> Cadence:
    """The cadences a session of the default spec has (read from rlrun, not copied)."""
    from rlrun.registry.liveness import heartbeat_seconds
    from rlrun.spec import MetaSpec

    defaults = MetaSpec.model_fields
    return Cadence(
        heartbeat_seconds=heartbeat_seconds(),
        fps=fps,
        eval_frequency=int(defaults["eval_frequency"].default),
        checkpoint_frequency=int(defaults["checkpoint_frequency"].default),
        keep_checkpoints=int(defaults["keep_checkpoints"].default),
    )


# ---- one simulated session --------------------------------------------------------------------


@dataclass(frozen=True)
class Slot:
    """A session to simulate: its run, index and row id."""

    run_id: str
    index: int
    session_id: int


@dataclass
class Outcome:
    """What one simulated session wrote (what the database must hold afterwards) and how long
    each write took."""

    slot: Slot
    latencies: dict[str, list[float]] = field(default_factory=dict)
    began: dict[str, list[float]] = field(default_factory=dict)  # time.monotonic() at each write's start
    running: tuple[float, float] = (0.0, 0.0)  # monotonic: from start_session's return to the loop's end
    errors: list[str] = field(default_factory=list)
    attempt_id: int | None = None
    evaluations: list[tuple[int, float]] = field(default_factory=list)  # (frame, mean)
    checkpoints: set[int] = field(default_factory=set)  # ids of the rows that must remain
    removed: set[int] = field(default_factory=set)  # ids of the rows that must be gone
    final_frame: int | None = None  # set once finish_session returned


class SimulatedSession:
    """The registry writes of `rlrun.session.loop.Session`, without the training between them."""

    def __init__(self, home: Path, url: str, slot: Slot, cadence: Cadence, seed: int) -> None:
        self.home, self.url, self.slot, self.cadence = home, url, slot, cadence
        self.outcome = Outcome(slot)
        self.rng = random.Random(seed)
        self.frame = 0
        self.best: float | None = None

    @contextmanager
    def timed(self, kind: str) -> Iterator[None]:
        """Time one write; an exception is counted as an error and the session goes on (a real
        session would stop, but the benchmark wants every error there is)."""
        self.outcome.began.setdefault(kind, []).append(time.monotonic())
        started = time.perf_counter()
        try:
            yield
        except Exception as error:
            line = (str(error).strip().splitlines() or [""])[0][:200]
            self.outcome.errors.append(f"{kind}: {type(error).__name__}: {line}")
        finally:
            self.outcome.latencies.setdefault(kind, []).append(time.perf_counter() - started)

    def run(self, seconds: float, start_offset: float) -> Outcome:
        registry: Registry | None = None
        with self.timed("open"):
            registry = Registry.open(self.home, self.url)
        if registry is None:
            return self.outcome
        try:
            self._live(registry, seconds, start_offset)
        except Exception:  # a bug in the simulation itself, not a registry error: say so loudly
            self.outcome.errors.append("simulation: " + traceback.format_exc())
        finally:
            registry.close()
        return self.outcome

    def _live(self, registry: Registry, seconds: float, start_offset: float) -> None:
        slot, host, pid = self.slot, socket.gethostname(), os.getpid()
        with self.timed("attempt"):
            self.outcome.attempt_id = registry.add_attempt(
                slot.session_id, kind="train", host=host, pid=pid, start_frame=0
            ).id
        with self.timed("start"):
            registry.start_session(slot.session_id, host=host, pid=pid)
        # Sessions of a launch start together, but set up (envs, networks) for different times.
        running_from = time.monotonic()
        started = running_from + start_offset
        last_beat = started
        time.sleep(start_offset)
        while (now := time.monotonic()) - started < seconds:
            before, self.frame = self.frame, int((now - started) * self.cadence.fps)
            kinds = self._evaluate_if_due(registry, before)
            if crossed(before, self.frame, self.cadence.checkpoint_frequency):
                kinds.append("periodic")
            if kinds:
                self._checkpoint(registry, kinds)
            if now - last_beat >= self.cadence.heartbeat_seconds:
                with self.timed("heartbeat"):
                    registry.heartbeat(slot.session_id, **self._progress())
                last_beat = now
            time.sleep(max(0.0, min(self._next_event(started, last_beat), started + seconds) - time.monotonic()))
        self.outcome.running = (running_from, time.monotonic())
        self.frame = int(seconds * self.cadence.fps)
        kinds = ["final", *self._evaluate(registry)]
        self._checkpoint(registry, kinds)
        with self.timed("finish"):
            registry.finish_session(slot.session_id, status="finished", **self._progress())
            self.outcome.final_frame = self.frame

    def _next_event(self, started: float, last_beat: float) -> float:
        """The monotonic time of the next write due: a heartbeat or a frame cadence crossed."""
        fps = self.cadence.fps
        due = [last_beat + self.cadence.heartbeat_seconds]
        for every in (self.cadence.eval_frequency, self.cadence.checkpoint_frequency):
            due.append(started + (self.frame // every + 1) * every / fps)
        return min(due)

    def _progress(self) -> ProgressCounts:
        return {"frame": self.frame, "episode": self.frame // 200, "opt_step": self.frame // 128}

    def _evaluate_if_due(self, registry: Registry, before: int) -> list[str]:
        if not crossed(before, self.frame, self.cadence.eval_frequency):
            return []
        return self._evaluate(registry)

    def _evaluate(self, registry: Registry) -> list[str]:
        """Record an evaluation (a learning curve with noise); ["best"] when it is the best yet."""
        mean = round(500 * (1 - math.exp(-self.frame / 200_000)) + self.rng.gauss(0, 25), 3)
        with self.timed("evaluation"):
            registry.add_evaluation(
                self.slot.session_id, frame=self.frame, mean=mean, std=5.0, min=mean - 10, max=mean + 10, episodes=10
            )
            self.outcome.evaluations.append((self.frame, mean))
        is_best = self.best is None or mean > self.best
        if is_best:
            self.best = mean
        return ["best"] if is_best else []

    def _checkpoint(self, registry: Registry, kinds: list[str]) -> None:
        slot = self.slot
        path = f"{slot.run_id}/s{slot.index}/checkpoints/f{self.frame:012d}"
        with self.timed("checkpoint"):
            record = registry.add_checkpoint(
                slot.session_id, frame=self.frame, kind="+".join(kinds), path=path, sha256="ab" * 32, size_bytes=250_000
            )
            self.outcome.checkpoints.add(record.id)
        records = []
        with self.timed("retention read"):
            records = registry.checkpoints(slot.session_id)
        keep = retention.to_keep(records, self.cadence.keep_checkpoints)
        for stale in records:
            if stale.id not in keep:
                with self.timed("remove checkpoint"):
                    registry.remove_checkpoint(stale.id)
                    self.outcome.checkpoints.discard(stale.id)
                    self.outcome.removed.add(stale.id)


def run_sessions(
    home: str, url: str, slots: list[Slot], cadence: Cadence, seconds: float, seed: int, launch_spread: float
) -> list[Outcome]:
    """Simulate `slots` on one thread each (each with its own Registry: its own connection)."""
    outcomes: list[Outcome] = []
    lock = threading.Lock()

    def one(slot: Slot, k: int) -> None:
        rng = random.Random(seed * 100_003 + k)
        outcome = SimulatedSession(Path(home), url, slot, cadence, seed=rng.randrange(2**32)).run(
            seconds, start_offset=rng.uniform(0, launch_spread)
        )
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=one, args=(slot, k)) for k, slot in enumerate(slots)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def _worker(
    home: str,
    url: str,
    slots: list[Slot],
    cadence: Cadence,
    seconds: float,
    seed: int,
    launch_spread: float,
    ready: Any,
    results: Any,
) -> None:
    """A worker process: import everything, wait for the others, then simulate its sessions."""
    # A session process has loaded these before its first write: "open" times connecting only.
    import sqlalchemy.dialects.postgresql.psycopg  # noqa: F401

    import rlrun.registry.server  # noqa: F401

    ready.wait()
    before = cpu_seconds(resource.RUSAGE_SELF)
    outcomes = run_sessions(home, url, slots, cadence, seconds, seed, launch_spread)
    results.put((outcomes, cpu_seconds(resource.RUSAGE_SELF) - before))


def cpu_seconds(who: int) -> float:
    used = resource.getrusage(who)
    return used.ru_utime + used.ru_stime


def run_cluster(
    home: Path,
    url: str,
    slots: list[Slot],
    cadence: Cadence,
    seconds: float,
    processes: int,
    launch_spread: float,
    seed: int = 0,
) -> tuple[list[Outcome], float]:
    """Simulate every slot, spread over `processes` spawned worker processes; their outcomes and
    the CPU seconds the workers spent simulating (not starting)."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    ready, results = ctx.Barrier(processes + 1), ctx.Queue()
    shares = [slots[i::processes] for i in range(processes)]
    workers = [
        ctx.Process(
            target=_worker, args=(str(home), url, share, cadence, seconds, seed + i, launch_spread, ready, results)
        )
        for i, share in enumerate(shares)
    ]
    for worker in workers:
        worker.start()
    ready.wait(timeout=300)
    outcomes: list[Outcome] = []
    cpu = 0.0
    deadline = time.monotonic() + seconds + 600
    while len(outcomes) < len(slots) and time.monotonic() < deadline:
        try:
            share, used = results.get(timeout=5)
        except queue.Empty:
            if not any(w.is_alive() for w in workers) and results.empty():
                break
            continue
        outcomes += share
        cpu += used
    for worker in workers:
        worker.join(timeout=60)
    return outcomes, cpu


# ---- the runs, and what the database holds afterwards -----------------------------------------


def create_runs(registry: Registry, runs: int, sessions: int, cadence: Cadence, seconds: float) -> list[Slot]:
    """The runs a launcher creates (`create_run`), `sessions` shared among them; their slots."""
    from rlrun.ids import new_run_id

    slots = []
    for r in range(runs):
        share = sessions // runs + (r < sessions % runs)
        run = registry.create_run(
            run_id=new_run_id(),
            name=f"load-{r}",
            spec_name="ppo_cartpole",
            algorithm="ppo",
            env_id="CartPole-v1",
            max_frame=int(seconds * cadence.fps),
            seed=r * 100,
            num_sessions=share,
            spec_json='{"name": "load"}',
            host=socket.gethostname(),
            pid=os.getpid(),
        )
        slots += [Slot(run.id, i, registry.get_session(run.id, i).id) for i in range(share)]
    return slots


def rows_lost(registry: Registry, outcomes: list[Outcome]) -> list[str]:
    """Every row a write returned for that the database does not hold (and every removed one it
    still holds), and every run whose sessions all finished but whose manifest (the stored run
    row, as last written) does not say so; one line each, empty when nothing is lost."""
    lost: list[str] = []
    details = {run_id: registry.get_run(run_id) for run_id in {o.slot.run_id for o in outcomes}}
    for run_id, detail in details.items():
        ended = [o for o in outcomes if o.slot.run_id == run_id and o.final_frame is not None]
        stored = read_manifest(paths.run_dir(registry.home, run_id)).run.status
        if len(ended) == detail.run.num_sessions and stored != "finished":
            lost.append(f"{run_id}: every session finished, the run is stored {stored}")
    for outcome in outcomes:
        slot, detail = outcome.slot, details[outcome.slot.run_id]
        who = f"{slot.run_id}/s{slot.index}"
        evaluations = sorted((e.frame, e.mean) for e in detail.evaluations if e.session_index == slot.index)
        for row in sorted(set(outcome.evaluations) - set(evaluations)):
            lost.append(f"{who}: evaluation at frame {row[0]} missing")
        if len(evaluations) != len(outcome.evaluations):
            lost.append(f"{who}: {len(evaluations)} evaluation rows for {len(outcome.evaluations)} written")
        checkpoints = {c.id for c in detail.checkpoints if c.session_index == slot.index}
        lost += [f"{who}: checkpoint {i} missing" for i in sorted(outcome.checkpoints - checkpoints)]
        lost += [f"{who}: removed checkpoint {i} still there" for i in sorted(outcome.removed & checkpoints)]
        attempts = {a.id: a for a in detail.attempts}
        if outcome.attempt_id is not None and outcome.attempt_id not in attempts:
            lost.append(f"{who}: attempt {outcome.attempt_id} missing")
        session = detail.sessions[slot.index]
        if outcome.final_frame is not None:
            if (session.status, session.frame) != ("finished", outcome.final_frame):
                lost.append(f"{who}: session {session.status} at {session.frame}, finished at {outcome.final_frame}")
            attempt = attempts.get(outcome.attempt_id or -1)
            if attempt is not None and attempt.end_status != "finished":
                lost.append(f"{who}: attempt ended {attempt.end_status}, not finished")
    return lost


# ---- watching: rlrun ls, and the server's own counters ----------------------------------------


class Listing(threading.Thread):
    """`rlrun ls` (the installed script, as a user runs it) once a second until stopped, each
    after an `rlrun --version`: what starting any command costs on this machine meanwhile."""

    def __init__(self, home: Path, url: str, pause: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.env = {**os.environ, "RLRUN_HOME": str(home), "RLRUN_DB": url}
        self.pause, self.stop = pause, threading.Event()
        self.seconds: list[float] = []
        self.version_seconds: list[float] = []
        self.errors: list[str] = []

    def _timed(self, *args: str) -> float:
        script = Path(sys.executable).parent / "rlrun"
        started = time.perf_counter()
        done = subprocess.run(
            [str(script) if script.exists() else "rlrun", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0 or "Traceback" in done.stderr:
            self.errors.append(f"exit {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1][:200]}")
        return time.perf_counter() - started

    def run(self) -> None:
        while not self.stop.is_set():
            self.version_seconds.append(self._timed("--version"))
            self.seconds.append(self._timed("ls"))
            self.stop.wait(self.pause)


class ServerWatch(threading.Thread):
    """The server's view, twice a second: connections to the database and backends waiting on a
    lock (peaks); deadlocks counted by the server over the whole time. And the machine's: how long
    a bare `SELECT 1` takes meanwhile (straight to the server, the floor under every write), and
    the load average."""

    def __init__(self, url: str, database: str) -> None:
        super().__init__(daemon=True)
        self.url, self.database, self.stop = url, database, threading.Event()
        self.peak_connections = self.peak_lock_waits = 0
        self.deadlocks = 0
        self.round_trips: list[float] = []
        self.load: list[float] = []
        self.waiting_on: Counter[str] = Counter()  # the statements found waiting on a lock, summed over samples

    def _deadlocks(self, conn: Any) -> int:
        found = conn.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = %s", (self.database,)).fetchone()
        return int(found[0]) if found else 0

    def run(self) -> None:
        import psycopg

        with psycopg.connect(plain(self.url), autocommit=True) as conn:
            first = self._deadlocks(conn)
            while not self.stop.wait(0.5):
                started = time.perf_counter()
                conn.execute("SELECT 1").fetchone()
                self.round_trips.append(time.perf_counter() - started)
                self.load.append(os.getloadavg()[0])
                connections, waiting = conn.execute(
                    "SELECT count(*), count(*) FILTER (WHERE wait_event_type = 'Lock') FROM pg_stat_activity"
                    " WHERE datname = %s AND pid <> pg_backend_pid()",
                    (self.database,),
                ).fetchone() or (0, 0)
                self.peak_connections = max(self.peak_connections, connections)
                self.peak_lock_waits = max(self.peak_lock_waits, waiting)
                for (query,) in conn.execute(
                    "SELECT left(query, 60) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'",
                    (self.database,),
                ).fetchall():
                    self.waiting_on[query] += 1
            conn.execute("SELECT pg_stat_clear_snapshot()")
            self.deadlocks = self._deadlocks(conn) - first


# ---- a database of the benchmark's own ---------------------------------------------------------


def plain(url: str) -> str:
    """The URL as libpq reads it (no SQLAlchemy driver name)."""
    return url.replace("postgresql+psycopg://", "postgresql://")


@contextmanager
def own_database(url: str, name: str) -> Iterator[str]:
    """A fresh database on the server of `url`, dropped afterwards; its URL."""
    import psycopg

    base = url.rpartition("/")[0]
    with psycopg.connect(plain(url), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(plain(url), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def server_cpu_seconds(pid: int | None) -> float:
    """CPU seconds of a PostgreSQL server on this machine: the postmaster's and its ended backends'
    (a backend's time is added to the postmaster's when it exits); 0 without a pid."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime


def max_connections(url: str) -> int:
    import psycopg

    with psycopg.connect(plain(url), autocommit=True) as conn:
        return int(conn.execute("SHOW max_connections").fetchone()[0])  # type: ignore[index]


# ---- one speed, and the summary ----------------------------------------------------------------


@dataclass
class Figures:
    speed: float
    latencies: dict[str, list[float]]
    steady: dict[str, list[float]]  # latencies of the writes made while every session was running
    steady_seconds: float
    errors: list[str]
    lost: list[str]
    sessions_reported: int
    listing: Listing
    watch: ServerWatch
    client_cpu: float  # seconds, the simulated sessions' processes
    server_cpu: float  # seconds, the server's backends (0 without --server-pid)


def measure(url: str, args: argparse.Namespace, cadence: Cadence, speed: float) -> Figures:
    name = f"rlrun_load_{os.getpid()}_{int(speed)}x"
    with own_database(url, name) as direct_url, tempfile.TemporaryDirectory() as tmp:
        # Sessions and `rlrun ls` connect the way the cluster is set up to: through the pooler if
        # there is one, straight to the server if not.
        db_url = f"{args.pool_url.rpartition('/')[0]}/{name}" if args.pool_url else direct_url
        home = Path(tmp) / "runs"  # run folders (manifests): the runs home a cluster shares
        with Registry.open(home, db_url) as registry:
            slots = create_runs(registry, args.runs, args.sessions, cadence, args.seconds)
        faster = cadence.faster(speed)
        listing, watch = Listing(home, db_url), ServerWatch(url, name)
        watch.start()
        listing.start()
        server_cpu = server_cpu_seconds(args.server_pid)
        outcomes, client_cpu = run_cluster(
            home, db_url, slots, faster, args.seconds, args.processes, args.launch_spread
        )
        listing.stop.set()
        watch.stop.set()
        listing.join()
        watch.join()
        time.sleep(1.0)  # the sessions' backends exit, and their CPU time is added to the server's
        server_cpu = server_cpu_seconds(args.server_pid) - server_cpu
        latencies: dict[str, list[float]] = {}
        errors: list[str] = []
        for outcome in outcomes:
            errors += outcome.errors
            for kind, values in outcome.latencies.items():
                latencies.setdefault(kind, []).extend(values)
        steady, steady_seconds = steady_state(outcomes)
        with Registry.open(home, direct_url) as registry:  # what the server itself holds
            lost = rows_lost(registry, outcomes)
    return Figures(
        speed, latencies, steady, steady_seconds, errors, lost, len(outcomes), listing, watch, client_cpu, server_cpu
    )


def steady_state(outcomes: list[Outcome]) -> tuple[dict[str, list[float]], float]:
    """The latencies of the recurring writes begun while every session was running (after the
    last one started, before the first one began to finish), and how long that lasted."""
    since = max((o.running[0] for o in outcomes), default=0.0)
    until = min((o.running[1] for o in outcomes), default=0.0)
    steady: dict[str, list[float]] = {}
    for outcome in outcomes:
        for kind in STEADY_KINDS:
            pairs = zip(outcome.began.get(kind, []), outcome.latencies.get(kind, []), strict=True)
            steady.setdefault(kind, []).extend(latency for began, latency in pairs if since <= began < until)
    return steady, max(0.0, until - since)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def report(figures: Figures, args: argparse.Namespace, cadence: Cadence) -> bool:
    """Print one speed's figures; True when every target is met."""
    faster = cadence.faster(figures.speed)
    evaluation, snapshot = faster.eval_frequency / faster.fps, faster.checkpoint_frequency / faster.fps
    print(
        f"\n== {figures.speed:g}× the real cadence: heartbeat every {faster.heartbeat_seconds:g} s, evaluation"
        f" every {evaluation:g} s, snapshot every {snapshot:g} s;\n   {args.sessions} sessions in {args.runs} runs"
        f" on {args.processes} processes for {args.seconds:g} s"
    )
    print(f"{'write':<18} {'count':>7} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    worst = table(figures.latencies, WRITE_KINDS)
    everything = [v for values in figures.latencies.values() for v in values]
    if everything:
        print(
            f"{'all writes':<18} {len(everything):>7} {statistics.median(everything) * 1000:>8.1f}"
            f" {quantile(everything, 0.99) * 1000:>8.1f} {max(everything) * 1000:>8.1f}"
        )
    print(f"while every session was running ({figures.steady_seconds:.0f} s: from the last start to the first end):")
    steady_worst = table(figures.steady, STEADY_KINDS)
    if everything:
        cpu = f"CPU per write: sessions' processes {figures.client_cpu / len(everything) * 1000:.2f} ms"
        if figures.server_cpu:
            cpu += f", server {figures.server_cpu / len(everything) * 1000:.2f} ms"
        print(f"{cpu}; {len(everything) / args.seconds:.0f} writes/s")
    listed, started = figures.listing.seconds, figures.listing.version_seconds
    if listed:
        print(
            f"rlrun ls: {len(listed)} runs, p50 {statistics.median(listed):.2f} s,"
            f" p99 {quantile(listed, 0.99):.2f} s, max {max(listed):.2f} s, {len(figures.listing.errors)} errors;"
            f" rlrun --version meanwhile p50 {statistics.median(started):.2f} s"
        )
    watch = figures.watch
    print(
        f"server: peak {watch.peak_connections} connections to the database, peak {watch.peak_lock_waits}"
        f" backends waiting on a lock, {watch.deadlocks} deadlocks"
    )
    for query, samples in watch.waiting_on.most_common(3):
        print(f"  waiting on a lock in {samples} samples: {query}")
    if watch.round_trips:
        print(
            f"machine: load average {min(watch.load):.1f}–{max(watch.load):.1f} on {os.cpu_count()} CPUs; a bare"
            f" SELECT 1 took p50 {statistics.median(watch.round_trips) * 1000:.1f} ms,"
            f" p99 {quantile(watch.round_trips, 0.99) * 1000:.1f} ms meanwhile"
        )
    missing = args.sessions - figures.sessions_reported
    errors = len(figures.errors) + len(figures.listing.errors) + missing
    for line in sorted(set(figures.errors + figures.listing.errors))[:8]:
        print(f"  error: {line}  (×{(figures.errors + figures.listing.errors).count(line)})")
    if missing:
        print(f"  error: {missing} sessions never reported back")
    for line in figures.lost[:8]:
        print(f"  lost: {line}")
    met = errors == 0 and not figures.lost and worst <= TARGET_P99_MS
    print(
        f"targets: errors {errors} (target 0), rows lost {len(figures.lost)} (target 0), worst p99 write"
        f" {worst:.1f} ms, {steady_worst:.1f} ms while all ran (target ≤ {TARGET_P99_MS:g} ms):"
        f" {'met' if met else 'NOT met'}"
    )
    return met


def table(latencies: dict[str, list[float]], kinds: tuple[str, ...]) -> float:
    """Print count, p50, p99 and max of each kind of write; the worst p99 in ms."""
    worst = 0.0
    for kind in kinds:
        values = latencies.get(kind, [])
        if not values:
            continue
        p99 = quantile(values, 0.99) * 1000
        worst = max(worst, p99)
        print(
            f"{kind:<18} {len(values):>7} {statistics.median(values) * 1000:>8.1f} {p99:>8.1f}"
            f" {max(values) * 1000:>8.1f}"
        )
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get(URL_ENV), help=f"a PostgreSQL URL (default ${URL_ENV})")
    parser.add_argument("--sessions", type=int, default=256)
    parser.add_argument("--runs", type=int, default=32, help="the sessions are shared among this many runs")
    parser.add_argument("--processes", type=int, default=16, help="worker processes the sessions run in")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long each speed runs")
    parser.add_argument("--speeds", default="1,10", help="cadence multipliers, comma-separated")
    parser.add_argument("--fps", type=float, default=5000.0, help="frames per second of a session at 1×")
    parser.add_argument(
        "--pool-url",
        help="the URL of a connection pooler (PgBouncer) in front of the server, which"
        " sessions and `rlrun ls` connect through; its database name is replaced by the benchmark's",
    )
    parser.add_argument(
        "--server-pid",
        type=int,
        help="the postmaster's pid, when the server runs on this machine:"
        " the CPU time its backends spend is reported per write",
    )
    parser.add_argument(
        "--launch-spread", type=float, default=1.0, help="seconds over which the sessions' first frames are spread"
    )
    args = parser.parse_args()
    if not args.url:
        parser.error(f"give --url or set ${URL_ENV} to a PostgreSQL server's URL")
    cadence = real_cadence(args.fps)
    print(
        f"server max_connections = {max_connections(args.url)}; {args.sessions} sessions hold one connection"
        f" each (+ `rlrun ls`, + this process's watch), {'through ' + args.pool_url if args.pool_url else 'direct'};"
        f" {os.cpu_count()} CPUs here"
    )
    verdicts = [report(measure(args.url, args, cadence, float(s)), args, cadence) for s in args.speeds.split(",")]
    sys.exit(0 if all(verdicts) else 1)


if __name__ == "__main__":
    main()
