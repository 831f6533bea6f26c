"""Sessions as SLURM jobs (`rlrun train/resume --slurm`) on a real one-node SLURM cluster on
loopback (`.ci/start-slurm`, named by $RLRUN_TEST_SLURM: its slurm.conf).

Every way SLURM ends a job early — its time limit (USR2 before it: submitit checkpoints and
requeues), `scontrol requeue` mid-episode (SIGTERM, then SLURM's own requeue), `scancel
--signal=KILL` (no warning: `rlrun resume --slurm` submits it again) — ends with the session
finished and its final snapshot, metrics log and evaluations bit for bit those of the same run
trained locally without interruption (`same_run.assert_same_run`); `rlrun stop` ends a job with a
snapshot, preempted. The four runs are submitted at once (`launched`), so their waits overlap: the
test hooks hold or freeze each session at a chosen frame, idle, until its test acts on it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import zygote
from helpers import SPACE, Result, cli_env, fast, heavy_modules, invoke, run_cli, search_spec, trials
from same_run import CADENCE, assert_same_run, final_state, reference_state

from rlrun.registry import Registry, RunDetail
from rlrun.spec import builtin_document
from rlrun.testhooks import FREEZE_ENV, HEARTBEAT_ENV, HOLD_ENV, STALE_ENV

SLURM_ENV = "RLRUN_TEST_SLURM"
CONF = os.environ.get(SLURM_ENV)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not CONF, reason=f"no SLURM cluster: ${SLURM_ENV} names none (as root, `bash .ci/start-slurm` starts one)"
    ),
]
pytest.importorskip("submitit", reason="the slurm extra is not installed (pip install 'rlrun[slurm]')")

SPEC = "ppo_cartpole"
FRAMES = "3000"
FREEZE_AT = 2345
"""Mid-episode (and mid-rollout): where a frozen session waits for its test to requeue, kill or stop it."""
STOPPED_FRAMES = "30000"
"""The budget of the run `rlrun stop` ends: woken, its session reads the stop at its next heartbeat,
on a busy machine a while later, and must not have trained to its end by then (it trains 1,000 frames
in a fraction of a second)."""
HOLD_AT = 1000
"""Where the time-limited session waits, after that frame's snapshot, for SLURM's warning (USR2)."""
SEARCH = ["--trials", "3"]
PARALLEL = ["--parallel", "2"]
"""Two trials at once, each its own SLURM job. Its first suggestions see no history (TPE samples its
first ten at random; the median pruner waits for five), so it is trial for trial the local search
of one trial at a time, which the driver's requeued job is compared with too: one reference."""
TRIAL_FREEZE_AT = 1500
"""Where the first trial's session to get there (after its snapshot at 1,000) freezes until the
driver has been asked to stop: the other trial's job starts while it is in flight, whatever the
load on the machine (a trial trains in seconds: under load, the second job once started only after
the first had ended)."""
POPULATION = ["--scheduler", "pbt", "--population", "2", "--interval", "1000", "--parallel", "2"]
"""Two members, two generations: the loser of the first forks the winner's snapshot."""
SEARCH_FREEZE_AT = 1500
"""Mid-way through the first trial (reinforce_cartpole, 3,000 frames a trial: `helpers.search_spec`)."""
TIME_LIMITED = ["--time", "2", "--set", "meta.slurm.signal_delay=95"]
"""Two minutes' limit, warned 95 s before it: SLURM sends USR2 within its 30 s check period after that,
25 to 55 s into the job. (A minute's limit warned 50 s before it came 10 s in, once, on a busy
machine before the job's Python had started its session: submitit requeued a job with nothing to
snapshot, which then trained from its start.)"""


@dataclass
class Launched:
    home: Path
    run_id: str
    job: str
    flag: Path

    def detail(self) -> RunDetail:
        with Registry.open(self.home, create=False) as registry:
            return registry.get_run(self.run_id)

    def log(self) -> str:
        return "".join(p.read_text() for p in (self.home / self.run_id / "slurm").glob(f"{self.job}_*_log.out"))


def slurm(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
    return done.stdout


def job_state(job: str) -> str:
    return slurm("squeue", "-h", "--states=all", "-o", "%T", "-j", job).strip() or "ENDED"


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def job_over(job: str) -> bool:
    from rlrun.training.slurm.queue import ACTIVE

    return job_state(job) not in ACTIVE


def launching(home: Path, argv: list[str], env: dict[str, str]) -> Any:
    """`rlrun ARGV --slurm` started (it returns once its job is queued)."""
    home.mkdir(parents=True)
    return zygote.start(
        [*argv, "--slurm"], {**cli_env(home), **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def submitted(home: Path, flag: Path, command: Any) -> Launched:
    """The run, or search, a `launching` command recorded, with its job."""
    _, stderr = command.communicate(timeout=120)
    assert command.returncode == 0, stderr
    if command.args[0] == "search":
        job = re.search(r"driven by SLURM job (\d+)", stderr)
        assert job, stderr
        return Launched(home, "search:latest", job[1], flag)
    with Registry.open(home, create=False) as registry:
        run = registry.resolve("latest")
    assert run.slurm_jobs and run.supervisor == f"SLURM job {run.slurm_jobs}"
    return Launched(home, run.id, run.slurm_jobs, flag)


@pytest.fixture(scope="module")
def trial_jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Any]]:
    """`rlrun search --slurm --wait --parallel 2` started first (its trials' jobs then train beside
    the others')."""
    os.environ["SLURM_CONF"] = str(CONF)
    base = tmp_path_factory.mktemp("slurm-trials")
    argv = ["search", str(search_spec(base)), *SEARCH, *PARALLEL, "--wait"]
    frozen = base / "frozen"
    command = launching(base / "runs", argv, {FREEZE_ENV: f"{TRIAL_FREEZE_AT}@{frozen}", HEARTBEAT_ENV: "0.2"})
    threading.Thread(target=stop_in_flight, args=(base / "runs", command, frozen), daemon=True).start()
    try:
        yield base / "runs", command
    finally:
        if command.poll() is None:
            command.kill()


def stop_in_flight(home: Path, command: Any, frozen: Path) -> None:
    """SIGTERM to the driver once the first two trials have snapshots, one of them frozen in flight
    (`TRIAL_FREEZE_AT`); once the driver has asked every trial in flight to stop, the frozen one is
    woken, to stop with a snapshot at its next heartbeat."""
    wait_for(
        lambda: (trials_with_a_snapshot(home) >= {0, 1} and frozen.exists()) or command.poll() is not None,
        "snapshots",
        timeout=300,
    )
    if command.poll() is None:
        command.send_signal(signal.SIGTERM)
        wait_for(lambda: every_trial_in_flight_asked_to_stop(home) or command.poll() is not None, "the stop")
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(frozen.read_text()), signal.SIGCONT)


def every_trial_in_flight_asked_to_stop(home: Path) -> bool:
    with Registry.open(home, create=False) as registry:
        runs = [registry.resolve(t.run_id) for t in trials_of_the_search(registry) if t.run_id is not None]
    return all(run.stop_requested_at is not None for run in runs if run.status == "running")


def population_spec(folder: Path) -> Path:
    """ppo_cartpole, tiny: two generations of 1,000 frames, a snapshot and an evaluation every 500."""
    document = builtin_document("ppo_cartpole")
    document["agent"].update(n_steps=16, n_epochs=2, batch_size=64)
    document["env"]["num_envs"] = 4
    document["meta"].update(
        max_frame=2000, eval_frequency=500, checkpoint_frequency=500, num_eval_episodes=2, log_frequency=500
    )
    document["search"] = SPACE
    path = folder / "population.json"
    path.write_text(json.dumps(document))
    return path


@pytest.fixture(scope="module")
def population_jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Any]]:
    """`rlrun search --scheduler pbt --parallel 2 --slurm --wait`: both members of a generation as
    SLURM jobs at once, started early (beside the others')."""
    os.environ["SLURM_CONF"] = str(CONF)
    base = tmp_path_factory.mktemp("slurm-population")
    command = launching(base / "runs", ["search", str(population_spec(base)), *POPULATION, "--wait"], {})
    try:
        yield base / "runs", command
    finally:
        if command.poll() is None:
            command.kill()


@pytest.fixture(scope="module")
def local_search(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same search driven locally, uninterrupted: the home it is recorded in."""
    home = tmp_path_factory.mktemp("local-search") / "runs"
    local = run_cli(home, "search", str(search_spec(home.parent)), *SEARCH)
    assert local.code == 0, local.stderr
    return home


def same_trials(home: Path, local_home: Path) -> list[Any]:
    """The search recorded in `home` is the local one, trial for trial; its trials."""
    remote, straight = trials(home), trials(local_home)
    assert [(t.number, t.params, t.state, t.value) for t in remote] == [
        (t.number, t.params, t.state, t.value) for t in straight
    ]
    return remote


@pytest.fixture(scope="module")
def launched(
    tmp_path_factory: pytest.TempPathFactory, trial_jobs: tuple[Path, Any], population_jobs: tuple[Path, Any]
) -> Iterator[dict[str, Launched]]:
    """The interrupted runs and search, submitted at once: each holds or freezes at its frame, idle."""
    base = tmp_path_factory.mktemp("slurm")
    commands = {}
    for name in ("timed_out", "requeued", "killed", "stopped"):
        home, flag = base / name / "runs", base / f"{name}.flag"
        hook = {HOLD_ENV: f"{HOLD_AT}@{flag}"} if name == "timed_out" else {FREEZE_ENV: f"{FREEZE_AT}@{flag}"}
        limits = TIME_LIMITED if name == "timed_out" else []
        frames = STOPPED_FRAMES if name == "stopped" else FRAMES
        argv = ["train", SPEC, *CADENCE, *fast(SPEC), "--frames", frames, *limits]
        commands[name] = (home, flag, launching(home, argv, {**hook, HEARTBEAT_ENV: "0.2"}))
    queued = ["train", SPEC, *CADENCE, *fast(SPEC), "--frames", FRAMES, "--sbatch", "begin=now+1hour"]
    commands["queued"] = (
        base / "queued" / "runs",
        base / "queued.flag",
        launching(base / "queued" / "runs", queued, {HEARTBEAT_ENV: "0.2"}),
    )
    home, flag = base / "search" / "runs", base / "search.flag"
    argv = ["search", str(search_spec(base)), *SEARCH]
    commands["search"] = (home, flag, launching(home, argv, {FREEZE_ENV: f"{SEARCH_FREEZE_AT}@{flag}"}))
    runs: dict[str, Launched] = {}
    try:
        for name, (home, flag, command) in commands.items():
            runs[name] = submitted(home, flag, command)
        # Released as soon as SLURM's warning comes, whatever the tests are doing: held past the time
        # limit, the job would be killed (TIMEOUT) before submitit could requeue it.
        threading.Thread(target=release_on_warning, args=(runs["timed_out"],), daemon=True).start()
        yield runs
    finally:
        for run in runs.values():  # a failed test's job, held or frozen, would wait for ever
            subprocess.run(["scancel", run.job], check=False, timeout=30)


def release_on_warning(run: Launched) -> None:
    """Let the held session go on once SLURM's USR2 has reached submitit (it is then waiting, in
    `checkpoint`, for the session's snapshot), until the job is over: a session that reaches the hold
    only after the warning (then in the requeued job) is let go too."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not job_over(run.job):
        if run.flag.exists() and "Caught signal SIGUSR2" in run.log():
            run.flag.unlink()
        time.sleep(0.2)


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The uninterrupted run, trained locally, shared with every other test that compares to it."""
    return reference_state(tmp_path_factory, SPEC, "--frames", FRAMES)


def frozen(run: Launched) -> int:
    """The pid of the run's session, frozen (SIGSTOP) by the test hook."""
    return int(wait_for(lambda: run.flag.exists() and run.flag.read_text(), f"run {run.run_id} to freeze"))


def attempts(run: Launched) -> list[tuple[str, str | None, bool]]:
    return [(a.kind, a.end_status, a.approximate) for a in run.detail().attempts]


def finished_as_straight(run: Launched, straight: dict[str, Any]) -> None:
    wait_for(lambda: job_over(run.job), f"job {run.job} to end", timeout=180)
    assert run.detail().run.status == "finished", run.log()[-3000:]
    assert_same_run(straight, final_state(run.home, run.run_id))


def test_scontrol_requeue_mid_episode_continues_exactly(
    launched: dict[str, Launched], straight: dict[str, Any]
) -> None:
    """`scontrol requeue` (held, then released): SLURM sends SIGTERM (the session snapshots at its
    next step, mid-episode) and runs the job again, which continues the same run and session: an
    attempt of kind requeue. While it waits in the queue, `ls` says so and a resume is refused."""
    run = launched["requeued"]
    # SLURM's SIGTERM, made pending before SLURM wakes the frozen session with SIGCONT: a frozen
    # process woken by SLURM's SIGCONT trained to its end before SLURM's SIGTERM came, once, on a busy
    # machine (a running one, as in real use, has no such moment). Then back in the queue, held there
    # while the test looks at it.
    os.kill(frozen(run), signal.SIGTERM)
    slurm("scontrol", "requeuehold", run.job)
    wait_for(lambda: job_state(run.job) == "PENDING", "the requeued job to wait in the queue")
    listed = invoke(run.home, "ls")
    assert "preempted (PENDING)" in listed.stdout, listed.stdout
    beside = invoke(run.home, "resume", run.run_id, "--slurm")  # the requeued job continues the run itself
    assert beside.code == 2 and f"job {run.job} is PENDING" in beside.stderr, beside.stderr
    slurm("scontrol", "release", run.job)
    finished_as_straight(run, straight)
    assert attempts(run) == [("train", "preempted", False), ("requeue", "finished", False)]
    requeued = run.detail().attempts[1].start_frame
    assert requeued > FREEZE_AT and requeued % 1000, "not from the SIGTERM's snapshot, mid-episode"


def test_a_job_killed_without_warning_resumes_exactly(launched: dict[str, Launched], straight: dict[str, Any]) -> None:
    """`scancel --signal=KILL`: nothing is snapshotted; `rlrun resume --slurm --wait` submits a new
    job, which continues from the newest snapshot before the kill."""
    run = launched["killed"]
    # The session's process dies while frozen, as on a lost node; then SLURM ends the job. (scancel
    # alone wakes a stopped process with SIGCONT before its KILL lands: on a busy machine the session
    # trained to its end in between, once, and there was nothing left to resume.)
    os.kill(frozen(run), signal.SIGKILL)
    subprocess.run(["scancel", "--signal=KILL", run.job], check=False, timeout=30)  # SLURM may have ended it
    wait_for(lambda: job_over(run.job), f"job {run.job} to end")
    resumed = run_cli(run.home, "resume", run.run_id, "--slurm", "--wait", "--time", "30")  # a placement edit
    assert resumed.code == 0, resumed.stderr
    with Registry.open(run.home, create=False) as registry:
        again = registry.resolve(run.run_id).slurm_jobs
    assert again and again != run.job
    assert run.detail().run.status == "finished"
    assert_same_run(straight, final_state(run.home, run.run_id))
    assert [(kind, approximate) for kind, _, approximate in attempts(run)] == [("train", False), ("resume", False)]
    with Registry.open(run.home, create=False) as registry:
        assert json.loads(registry.latest_spec(run.run_id).spec_json)["meta"]["slurm"]["time"] == 30


def test_rlrun_stop_ends_the_job_with_a_snapshot(launched: dict[str, Launched]) -> None:
    """`rlrun stop`: the session reads the request at its next heartbeat, snapshots, is preempted,
    and the job ends without a requeue; `ls` and `show` say so, and how to continue."""
    run = launched["stopped"]
    pid = frozen(run)
    # Frozen since the module's jobs started, its heartbeat may be older than the 30 s after which a
    # session reads crashed, and a crashed run has nothing to stop: the stop sees it as the live,
    # frozen session it is.
    stopped = invoke(run.home, "stop", run.run_id, env={STALE_ENV: "3600"})
    assert stopped.code == 0, stopped.stderr
    assert f"rlrun resume {run.run_id} --slurm" in stopped.stderr
    os.kill(pid, signal.SIGCONT)
    wait_for(lambda: job_over(run.job), f"job {run.job} to end")
    detail = run.detail()
    assert detail.run.status == "preempted"
    assert max(detail.checkpoints, key=lambda c: c.frame).kind == "preempt"
    assert attempts(run) == [("train", "preempted", False)]
    shown = invoke(run.home, "show", run.run_id)
    assert f"slurm: job {run.job} " in shown.stdout
    assert heavy_modules(run.home, "ls") == ""  # squeue asked, nothing heavy imported


def test_rlrun_stop_of_a_queued_job(launched: dict[str, Launched]) -> None:
    """`rlrun stop` of a run whose job has not started: once it starts, its session stops at its
    first heartbeat with a snapshot, preempted, and the job ends without a requeue."""
    run = launched["queued"]
    assert job_state(run.job) == "PENDING"
    # Silent past the liveness limit (shortened here), its session reads crashed: the queued job says
    # otherwise, and `ls` and `show` say queued.
    listed = invoke(run.home, "ls", env={STALE_ENV: "0.1"})
    assert "queued (PENDING)" in listed.stdout and "crashed" not in listed.stdout, listed.stdout
    shown = invoke(run.home, "show", run.run_id, env={STALE_ENV: "0.1"})
    assert f"{run.run_id}  queued" in shown.stdout and f"job {run.job} PENDING" in shown.stdout, shown.stdout
    stopped = invoke(run.home, "stop", run.run_id, env={STALE_ENV: "0.1"})
    assert stopped.code == 0 and "crashed" in stopped.stderr and "stop requested" in stopped.stderr, stopped.stderr
    slurm("scontrol", "update", f"jobid={run.job}", "StartTime=now")
    wait_for(lambda: job_over(run.job), f"job {run.job} to end")
    detail = run.detail()
    assert detail.run.status == "preempted", run.log()[-3000:]
    assert max(detail.checkpoints, key=lambda c: c.frame).kind == "preempt"
    assert attempts(run) == [("train", "preempted", False)]


def test_the_time_limit_requeues_and_continues_exactly(launched: dict[str, Launched], straight: dict[str, Any]) -> None:
    """A time limit: USR2 before it reaches submitit, whose checkpoint stops the session with a
    snapshot; submitit requeues the job, which continues the same session to the end."""
    run = launched["timed_out"]
    finished_as_straight(run, straight)
    kinds = attempts(run)
    assert kinds[0] == ("train", "preempted", False) and kinds[-1] == ("requeue", "finished", False)
    assert all(kind == "requeue" and not approximate for kind, _, approximate in kinds[1:])
    assert "Caught signal SIGUSR2" in run.log() and "this job is timed-out" in run.log()
    # submitit's job pickle lies there, unpickled by the job: a folder only its owner may write in
    assert (run.home / run.run_id / "slurm").stat().st_mode & 0o777 == 0o700


def test_a_search_survives_its_driver_job_requeued(launched: dict[str, Launched], local_search: Path) -> None:
    """The driver's job requeued mid-trial: the job run again takes the search back and continues it,
    the same search as one driven locally without interruption, trial for trial, the interrupted
    trial's run bit for bit."""
    run = launched["search"]
    frozen(run)
    slurm("scontrol", "requeue", run.job)
    local_home = local_search  # trained while SLURM requeues
    wait_for(lambda: job_over(run.job), f"job {run.job} to end", timeout=180)
    remote, straight = same_trials(run.home, local_home), trials(local_home)
    assert len(remote) == 3 and all(t.state == "complete" for t in remote)
    assert [a.kind for a in Launched(run.home, remote[0].run_id, run.job, run.flag).detail().attempts] == [
        "train",
        "resume",
    ]
    assert_same_run(final_state(local_home, straight[0].run_id), final_state(run.home, remote[0].run_id))


def test_a_search_whose_trials_are_jobs(trial_jobs: tuple[Path, Any], local_search: Path) -> None:
    """`--slurm --wait --parallel 2`: the driver here, two trials at once, each trial's session a
    SLURM job that a worker process waits for (their evaluations reaching the pruner from the
    registry). SIGTERM to the driver stops both trials' jobs with snapshots; `rlrun resume
    search:latest --slurm --wait` continues them as jobs and runs the third: the same search as the
    local one, trial for trial, each trial's run bit for bit, recorded as run by its jobs; the first
    two trials' jobs trained at the same time."""
    home, command = trial_jobs
    _, stderr = command.communicate(timeout=180)  # SIGTERM'd by `stop_in_flight`
    assert command.returncode == 128 + signal.SIGTERM, stderr
    resumed = invoke(home, "resume", "search:latest", "--slurm", "--wait")
    assert resumed.code == 0, resumed.stderr
    remote = same_trials(home, local_search)
    assert len(remote) == 3
    spans, kinds = [], []
    for trial, straight in zip(remote, trials(local_search), strict=True):
        with Registry.open(home, create=False) as registry:
            detail = registry.get_run(trial.run_id)
        run = detail.run
        assert run.slurm_jobs and run.supervisor == f"SLURM job {run.slurm_jobs}"
        spans.append((detail.attempts[0].started_at, detail.attempts[-1].ended_at))
        kinds.append([a.kind for a in detail.attempts])
        if trial.state == "complete":
            assert_same_run(final_state(local_search, straight.run_id), final_state(home, trial.run_id))
    assert spans[1][0] < spans[0][1], "trial 1's job started only after trial 0's ended"
    assert ["train", "resume"] in kinds[:2], f"neither trial in flight was stopped and continued: {kinds}"


def trials_with_a_snapshot(home: Path) -> set[int]:
    if not (home / "registry.sqlite").exists():
        return set()
    with contextlib.suppress(Exception), Registry.open(home, create=False) as registry:  # still being created
        found = trials_of_the_search(registry)
        return {t.number for t in found if t.run_id is not None and registry.get_run(t.run_id).checkpoints}
    return set()


def trials_of_the_search(registry: Registry) -> list[Any]:
    """The trials of the one search a home holds (none before it is recorded)."""
    searches = registry.list_searches(1)
    return registry.get_search(searches[0][0].id).trials if searches else []


@pytest.fixture(scope="module")
def local_population(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same population trained locally, one member at a time: its home."""
    folder = tmp_path_factory.mktemp("local-population")
    local = run_cli(folder / "runs", "search", str(population_spec(folder)), *POPULATION[:-2])
    assert local.code == 0, local.stderr
    return folder / "runs"


def lineage(home: Path) -> list[tuple[int, int, int | None, int]]:
    """Each segment's (member, generation, member it continues, frame), in trial order."""
    with Registry.open(home, create=False) as registry:
        search = registry.resolve_search("search:latest")
        numbers = {t.id: t.number for t in registry.get_search(search.id).trials}
        lines = sorted(registry.get_lineage(search.id), key=lambda line: numbers[line.trial_id])
    return [(line.member, line.generation, line.parent_member, line.frame) for line in lines]


def test_a_population_whose_members_are_jobs(population_jobs: tuple[Path, Any], local_population: Path) -> None:
    """PBT with `--slurm --wait --parallel 2`: each generation's members train as SLURM jobs (two
    may run at once; a member's short segment may also end before the other's job starts, so when
    they overlap is not asserted: the trials test above holds two running together), the exploit
    forks the winner's snapshot in a job of its own: the same population as the local one, segment
    for segment (lineage, values, scores), each segment's run bit for bit."""
    home, command = population_jobs
    _, stderr = command.communicate(timeout=240)
    assert command.returncode == 0, stderr
    remote, straight = same_trials(home, local_population), trials(local_population)
    assert len(remote) == 4 and all(t.state == "complete" for t in remote)
    assert lineage(home) == lineage(local_population)
    assert any(parent not in (None, member) for member, _, parent, _ in lineage(home)), "no exploit to compare"
    for trial, local in zip(remote, straight, strict=True):
        assert trial.intermediate == local.intermediate
        with Registry.open(home, create=False) as registry:
            detail = registry.get_run(trial.run_id)
        assert detail.run.slurm_jobs and detail.run.supervisor == f"SLURM job {detail.run.slurm_jobs}"
        assert_same_run(final_state(local_population, local.run_id), final_state(home, trial.run_id))


# ---- bad input and outages: one line, nothing recorded --------------------------------------


def refused(home: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    done = invoke(home, "train", SPEC, "--frames", "1000", "--slurm", *args, env=env)
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (home / "registry.sqlite").exists() or "no runs" in invoke(home, "ls").stderr
    return done


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--partition", "nowhere"], "--partition nowhere"),
        (["--gpus", "1"], "--gpus 1"),
        (["--time", "500"], "--time 500"),
        (["--sbatch", "constraint=a100"], "--sbatch constraint=a100"),
    ],
)
def test_options_slurm_refuses(tmp_path: Path, args: list[str], said: str) -> None:
    os.environ["SLURM_CONF"] = str(CONF)
    done = refused(tmp_path / "runs", *args)
    assert done.code == 2 and "SLURM refuses the job" in done.stderr and said in done.stderr, done.stderr


def test_a_controller_that_does_not_answer(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    text = Path(str(CONF)).read_text()
    conf.write_text(text.replace("SlurmctldPort=6817", "SlurmctldPort=9"))  # discard: nothing listens
    done = refused(tmp_path / "runs", env={"SLURM_CONF": str(conf)})
    assert done.code == 3 and "SLURM controller does not answer" in done.stderr, done.stderr


def test_without_slurm_commands(tmp_path: Path) -> None:
    done = refused(tmp_path / "runs", env={"PATH": str(tmp_path)})  # no sbatch, squeue or scontrol there
    assert done.code == 2 and "`scontrol` is not on PATH" in done.stderr, done.stderr


def test_without_the_slurm_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "submitit", None)  # as if not installed: import fails
    done = refused(tmp_path / "runs")
    assert done.code == 2 and "pip install 'rlrun[slurm]'" in done.stderr, done.stderr


def test_slurm_options_need_slurm(tmp_path: Path) -> None:
    done = invoke(tmp_path / "runs", "train", SPEC, "--partition", "debug")
    assert done.code == 2 and "--partition submits SLURM jobs; add --slurm" in done.stderr, done.stderr
