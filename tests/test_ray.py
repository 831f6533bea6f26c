"""Sessions on a real Ray cluster (`rlrun train/resume --ray`): a head with no CPU and worker nodes of
one CPU each on 127.0.0.1 (and two CPU-less nodes for detached runs' supervisors), one cluster for
the whole module, and a real PostgreSQL registry.

Every way a session can lose its worker — its node removed, its worker killed, its worker asked to
stop (SIGTERM, a spot notice), the driver killed — ends with the session finished, and its final
snapshot, metrics log and evaluations bit for bit those of the same run trained locally without
interruption (`test_resume.assert_same_run`). The test hooks (`rlrun.testhooks`) stop each attempt
at a chosen frame, so no test waits on a clock.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import zygote
from helpers import Result, cli_env, fast, search_spec, trials
from same_run import CADENCE, assert_same_run, final_state, reference_state

from rlrun.registry import AttemptRecord, Registry, RunDetail
from rlrun.registry.liveness import pid_alive
from rlrun.testhooks import (
    CRASH_ENV,
    FREEZE_ENV,
    HANG_ENV,
    HEARTBEAT_ENV,
    HOLD_ENV,
    SIGNAL_AT_ENV,
    STALE_ENV,
)

pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'rlrun[ray]')")

pytest_plugins = ["postgres_server"]
pytestmark = pytest.mark.slow  # its tests run on one pytest-xdist worker (tests/conftest.py: loadfile)

WORKERS = 3
SUPERVISOR = "rlrun_supervisor"
"""The custom resource of the nodes a detached run's supervisor is placed on (`--supervisor-on`):
CPU-less nodes that run no session, so removing one takes only the supervisor with it."""
FRAMES = "3000"
SEARCH = ["--trials", "2", "--prune-after", "1", "--set", "meta.max_frame=10000"]
"""A search whose second trial the median pruner stops at its first evaluation (frame 1,000),
long enough for the stop to reach the session on its node well before its end."""
HEALTH_CHECKS = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 1000,
    "health_check_timeout_ms": 3000,
    "health_check_failure_threshold": 3,
}
"""How soon the cluster's control store calls a removed node dead: 2.6 s here, not Ray's 16.6 s
(5 checks 3 s apart), which every test that removes a node waited out; three missed checks in a
row, each allowed 3 s, still tell a killed node from a busy one."""
ISOLATED = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RLRUN_TENSORBOARD": "0"}
"""Every node and driver binds to 127.0.0.1 only; TensorBoard mirrors cost start-up time here."""


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real multi-node cluster for the module: a head that runs no session, and worker nodes
    of one CPU each. A test that removes a node adds a fresh one back. Its nodes know the S3
    server on loopback (as a cloud node knows its store) and keep the working copies of homes in
    object storage in a folder of their own, not the driver's."""
    os.environ.update(ISOLATED)
    with contextlib.suppress(pytest.skip.Exception):
        request.getfixturevalue("s3_bucket")
    os.environ["RLRUN_CACHE"] = str(tmp_path_factory.mktemp("nodes-working-copies"))
    from ray.cluster_utils import Cluster

    made = Cluster(
        initialize_head=True,
        # No log monitor: it tails every worker's log for drivers, and rlrun's drivers take none
        # (`log_to_driver=False`); the files stay, for the tests that read them.
        head_node_args={
            "num_cpus": 0,
            "include_dashboard": False,
            "include_log_monitor": False,
            "_system_config": HEALTH_CHECKS,
        },
    )
    try:
        for _ in range(WORKERS):
            made.add_node(num_cpus=1)
        for _ in range(2):
            made.add_node(num_cpus=0, resources={SUPERVISOR: 1})
        made.wait_for_nodes()
        yield made
    finally:
        made.shutdown()


@pytest.fixture
def registry_url(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The sessions record into PostgreSQL, as on a real cluster; `final_state` reads it too."""
    monkeypatch.setenv("RLRUN_DB", postgres_url)
    return postgres_url


def straight(tmp_path_factory: pytest.TempPathFactory, spec: str, *args: str) -> dict[str, Any]:
    """The uninterrupted run, trained locally (SQLite registry), once per test run for each spec."""
    return reference_state(tmp_path_factory, spec, "--frames", FRAMES, *args)


def command(home: Path, url: str, *args: str, env: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    return [*args], {**cli_env(home), "RLRUN_DB": url, **ISOLATED, **(env or {})}


def train(
    home: Path, url: str, cluster: Any, spec: str, *args: str, env: dict[str, str] | None = None, wait: bool = True
) -> Any:
    argv, environment = command(
        home, url, "train", spec, *CADENCE, *fast(spec), "--frames", FRAMES, *args, "--ray", cluster.address, env=env
    )
    process = zygote.start(
        argv, environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    if not wait:
        return process
    return finished(process)


def finished(process: subprocess.Popen[str], timeout: float = 240) -> Result:
    stdout, stderr = process.communicate(timeout=timeout)
    return Result(process.returncode, stdout, stderr)


def detail(home: Path, url: str) -> RunDetail:
    return detail_of(home, url, "latest")


def detail_of(home: Path, url: str, reference: str) -> RunDetail:
    with Registry.open(home, url, create=False) as registry:
        return registry.get_run(registry.resolve(reference).id)


def attempts_of(run: RunDetail, index: int) -> list[AttemptRecord]:
    return [a for a in run.attempts if a.session_index == index]


def wait_for(condition: Callable[[], Any], process: subprocess.Popen[str] | None = None, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the driver ended first ({process.returncode}): {process.stderr.read()[-3000:]}")
        time.sleep(0.1)
    raise AssertionError("timed out")


def hung_snapshot(flag: Path) -> Callable[[], Path | None]:
    """The temporary folder of the snapshot a session hung half-way through writing, once it hangs
    (HANG_ENV's once-file `flag` names it; another session's snapshot of the same frame is a folder
    of the same pattern, there only while that session writes it)."""
    return lambda: Path(flag.read_text()) if flag.exists() else None


def node_of(cluster: Any, node_id: str) -> Any:
    return next(n for n in cluster.list_all_nodes() if n.node_id.startswith(node_id))


@contextlib.contextmanager
def losing_a_node(cluster: Any) -> Iterator[None]:
    """The module's cluster keeps its make-up: each node removed inside is replaced after by one
    of its kind (its CPUs and custom resources: a session worker, or a supervisors' node)."""
    before = Counter(_node_kind(n) for n in cluster.list_all_nodes())
    try:
        yield
    finally:
        missing = before - Counter(_node_kind(n) for n in cluster.list_all_nodes())
        for (cpus, resources), count in missing.items():
            for _ in range(count):
                cluster.add_node(num_cpus=cpus, resources=dict(resources))
        cluster.wait_for_nodes()


def _node_kind(node: Any) -> tuple[Any, tuple[tuple[str, float], ...]]:
    params = node._ray_params  # what the node was started with (ray.cluster_utils keeps no other record)
    return params.num_cpus, tuple(sorted((params.resources or {}).items()))


# ---------------------------------------------------------------------------------------------


def test_a_removed_node_two_sessions_ppo_mid_rollout(
    cluster: Any, registry_url: str, home: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Two sessions spread over the nodes; the node of the one hung mid-snapshot is removed
    (ungracefully): Ray runs it again on another node, where it continues from its newest complete
    snapshot (PPO, mid-rollout) and ends as the uninterrupted run does."""
    a = straight(tmp_path_factory, "ppo_cartpole", "--sessions", "2")
    flag = tmp_path / "hung"
    with losing_a_node(cluster):
        driver = train(
            home,
            registry_url,
            cluster,
            "ppo_cartpole",
            "--sessions",
            "2",
            wait=False,
            env={HANG_ENV: f"f000000002000@{flag}"},
        )
        hung = wait_for(hung_snapshot(flag), driver)
        index = int(hung.parent.parent.name.removeprefix("s"))
        first = attempts_of(detail(home, registry_url), index)[-1]
        assert first.node, "the attempt records its node"
        cluster.remove_node(node_of(cluster, first.node), allow_graceful=False)
        done = finished(driver)
    assert done.code == 0, done.stderr
    assert "Traceback" not in done.stderr
    run = detail(home, registry_url)
    lost, other = attempts_of(run, index), attempts_of(run, 1 - index)
    assert [(t.kind, t.end_status) for t in lost] == [("train", "crashed"), ("retry", "finished")]
    assert lost[1].start_frame == 1000 and not lost[1].approximate
    assert lost[1].node != lost[0].node, "the retry ran on another node"
    assert [(t.kind, t.end_status) for t in other] == [("train", "finished")]
    assert other[0].node != lost[0].node, "two sessions, two nodes"
    assert lost[1].lease == lost[0].lease + 1
    assert not hung.exists(), "the torn snapshot was swept away"
    assert not list(home.glob(".rlrun-probe-*")), "the storage check leaves nothing behind"
    assert_same_run(a, final_state(home))
    argv, environment = command(home, registry_url, "show", "latest")
    shown = zygote.run(argv, environment, timeout=60)
    assert "retry (automatic)" in shown.stdout and lost[1].node in shown.stdout


@pytest.mark.any_home
def test_a_killed_worker_dqn_replay_memory(
    cluster: Any, registry_url: str, home: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """kill -9 of the worker (it kills itself right after recording its second snapshot): the
    retry continues from that snapshot with the replay memory it holds. On a home in S3 the nodes
    share no folder with the driver or with one another's working copies: everything goes through
    the store."""
    a = straight(tmp_path_factory, "dqn_cartpole")
    done = train(home, registry_url, cluster, "dqn_cartpole", env={CRASH_ENV: "checkpoint-recorded#2"})
    assert done.code == 0, done.stderr
    run = detail(home, registry_url)
    assert [(t.kind, t.start_frame, t.end_status) for t in run.attempts] == [
        ("train", 0, "crashed"),
        ("retry", 2000, "finished"),
    ]
    assert_same_run(a, final_state(home))


def test_sigterm_to_a_worker_preempts_then_retries(
    cluster: Any, registry_url: str, home: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A spot notice: SIGTERM to the session's worker writes a snapshot, ends the attempt
    preempted, and its retry resumes it exactly; the run ends finished (exit 0)."""
    a = straight(tmp_path_factory, "ppo_cartpole")
    done = train(home, registry_url, cluster, "ppo_cartpole", env={SIGNAL_AT_ENV: "1500"})
    assert done.code == 0, done.stderr
    assert "Traceback" not in done.stderr and "WorkerStopped" not in done.stderr, done.stderr
    run = detail(home, registry_url)
    assert [(t.kind, t.end_status) for t in run.attempts] == [("train", "preempted"), ("retry", "finished")]
    assert 1500 <= run.attempts[1].start_frame < 1500 + 8, "it continued from the snapshot the signal wrote"
    assert_same_run(a, final_state(home))


def test_a_killed_driver_then_resume_on_the_cluster(
    cluster: Any, registry_url: str, home: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """kill -9 of the driver: its sessions end with it (Ray ends a dead driver's tasks), `rlrun ls`
    says crashed, and `rlrun resume --ray` continues from the newest snapshot: nothing lost, and
    the frames after it trained once in the final account."""
    a = straight(tmp_path_factory, "reinforce_cartpole")
    flag = tmp_path / "hung"
    driver = train(
        home, registry_url, cluster, "reinforce_cartpole", wait=False, env={HANG_ENV: f"f000000002000@{flag}"}
    )
    wait_for(hung_snapshot(flag), driver)
    os.kill(driver.pid, signal.SIGKILL)
    finished(driver)
    argv, environment = command(home, registry_url, "ls", "--json")

    def listed_status() -> str | None:
        status = zygote.run(argv, environment, timeout=60)
        found = status.stdout and json.loads(status.stdout)[0]["status"]
        return found if found == "crashed" else None

    assert wait_for(listed_status, timeout=60) == "crashed"
    argv, environment = command(home, registry_url, "resume", "latest", "--ray", cluster.address)
    resumed = zygote.run(argv, environment, timeout=240)
    assert resumed.returncode == 0, resumed.stderr
    run = detail(home, registry_url)
    assert [(t.kind, t.start_frame, t.end_status) for t in run.attempts] == [
        ("train", 0, "crashed"),
        ("resume", 1000, "finished"),
    ]
    assert_same_run(a, final_state(home))
    workers = {n.node_id for n in cluster.list_all_nodes() if n._ray_params.num_cpus}  # as _node_kind reads it
    assert passed_storage_check(cluster, home) == workers, "every session node passed the train's check, kept"


def passed_storage_check(cluster: Any, home: Path) -> set[str]:
    """The nodes the cluster keeps as having passed the storage check for `home` (no SQLite
    registry: these tests record into PostgreSQL), read by a driver of its own."""
    script = (
        "import json, sys, ray\n"
        "from pathlib import Path\n"
        "from rlrun.training.ray.preflight import _PassedNodes\n"
        "ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False)\n"
        "print(json.dumps(sorted(_PassedNodes({'runs home': Path(sys.argv[2])}, None).read())))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, cluster.address, str(home)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_stale_attempt_that_wakes_writes_nothing(
    cluster: Any, registry_url: str, home: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A frozen worker (SIGSTOP) is alive to Ray but silent in the registry: the driver presumes it
    lost and starts a retry on another node, which takes the lease. Woken (SIGCONT) while the retry
    trains, the old attempt finds its lease taken at its next write and stops: no checkpoint, no
    evaluation, no metrics row, no status of its own; the run ends as the uninterrupted one."""
    a = straight(tmp_path_factory, "reinforce_cartpole")
    flag = tmp_path / "frozen"
    driver = train(
        home,
        registry_url,
        cluster,
        "reinforce_cartpole",
        wait=False,
        env={FREEZE_ENV: f"1500@{flag}", STALE_ENV: "3", HEARTBEAT_ENV: "0.2"},
    )
    stale = int(wait_for(lambda: flag.exists() and flag.read_text(), driver))
    with Registry.open(home, registry_url, create=False) as registry:
        session = registry.get_session(registry.resolve("latest").id, 0)
        taken = wait_for(lambda: registry.silence(session.id)[0] > session.lease, driver)
        os.kill(stale, signal.SIGCONT)
    assert taken
    done = finished(driver)
    assert done.code == 0, done.stderr
    run = detail(home, registry_url)
    assert [(t.kind, t.pid, t.end_status) for t in run.attempts] == [
        ("train", stale, "crashed"),
        ("retry", run.attempts[1].pid, "finished"),
    ]
    assert run.attempts[1].start_frame == 1000 and run.attempts[1].node != run.attempts[0].node
    assert_same_run(a, final_state(home))  # its metrics log, evaluations and snapshots: the retry's alone
    logs = Path(cluster.head_node.get_session_dir_path()) / "logs"
    refused = [p for p in logs.glob("worker-*.err") if f"run {run.run.id}: session" in p.read_text(errors="replace")]
    assert refused, "the woken attempt never reached a write (it must try one, and be refused)"
    assert "stops without writing" in refused[0].read_text()


def test_sigterm_to_the_driver_stops_every_session_with_a_snapshot(cluster: Any, registry_url: str, home: Path) -> None:
    """A SIGTERM to `rlrun` itself stops every session at its next step with a snapshot, as on one
    machine: the run is preempted, exit 143, and no session is retried."""
    driver = train(home, registry_url, cluster, "reinforce_cartpole", "--sessions", "2", "--frames", "1M", wait=False)

    def both_training() -> bool:
        with Registry.open(home, registry_url, create=False) as registry:
            run = registry.get_run(registry.resolve("latest").id) if registry.count_runs() else None
        return run is not None and {c.session_index for c in run.checkpoints} == {0, 1}

    wait_for(both_training, driver)
    driver.send_signal(signal.SIGTERM)
    done = finished(driver)
    assert done.code == 128 + signal.SIGTERM, done.stderr
    run = detail(home, registry_url)
    assert run.run.status == "preempted" and {s.status for s in run.sessions} == {"preempted"}
    assert [(t.kind, t.end_status) for t in run.attempts] == [("train", "preempted")] * 2
    for session in run.sessions:
        newest = max((c for c in run.checkpoints if c.session_index == session.index), key=lambda c: c.frame)
        # At the stop frame: a "preempt" snapshot, or the scheduled one the stop came right after.
        assert newest.frame == session.frame and (newest.kind == "preempt" or newest.frame % 1000 == 0)


def finished_command(
    home: Path, url: str, *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> Result:
    """`rlrun ARGS` against `home` and the registry at `url`, run to its end."""
    argv, environment = command(home, url, *args, env=env)
    done = zygote.run(argv, environment, timeout=timeout)
    return Result(done.returncode, done.stdout, done.stderr)


@dataclass
class LocalSearch:
    """A search run on this machine: what the cluster's must equal. `trials` as the search left
    them; `states`, each trial's run at its end (a pruned trial's resumed to its budget)."""

    trials: list[Any]
    states: list[dict[str, Any]]


_LOCAL_SEARCHES: dict[tuple[str, ...], LocalSearch] = {}


def searched_locally(tmp_path_factory: pytest.TempPathFactory, url: str, spec: str, *options: str) -> LocalSearch:
    """`rlrun search SPEC OPTIONS` on this machine, once per test run for each spec and options
    (the module's tests share one xdist worker, so a dict keeps it; the registry is emptied for
    each test, so the runs' final states are kept, not their rows)."""
    key = (Path(spec).read_text(), *options)
    if key not in _LOCAL_SEARCHES:
        home = tmp_path_factory.mktemp("local-search")
        done = finished_command(home, url, "search", spec, *options, "--json")
        assert done.code == 0, done.stderr
        found = trials(home, f"search:{done.json()['search_id']}")
        for trial in found:
            if trial.state == "pruned":
                resumed = finished_command(home, url, "resume", trial.run_id, timeout=120)
                assert resumed.code == 0, resumed.stderr
        _LOCAL_SEARCHES[key] = LocalSearch(found, [final_state(home, t.run_id) for t in found])
    return _LOCAL_SEARCHES[key]


def resumed_on(cluster: Any, home: Path, url: str, search: str) -> list[Any]:
    """`rlrun resume SEARCH --ray` on the cluster, to its end: the search's trials then."""
    done = finished_command(home, url, "resume", search, "--ray", cluster.address)
    assert done.code == 0 and "Traceback" not in done.stderr, done.stderr
    return trials(home, search)


def assert_same_search(home: Path, url: str, local: LocalSearch, remote: list[Any]) -> None:
    """The cluster's SEARCH is the local one, trial for trial (parameters, state, score, the scores
    the pruner saw, its note), each trial's run bit for bit. The pruner's stop reaches a session on
    its node a moment later than a local one, so a pruned trial's run may stop a little later: each
    is resumed to its end first, as the local one was (which is why this comes last in a test)."""
    assert [(t.number, t.params, t.state, t.value, t.intermediate, t.note) for t in remote] == [
        (t.number, t.params, t.state, t.value, t.intermediate, t.note) for t in local.trials
    ]
    for trial in remote:
        if trial.state == "pruned":
            resumed = finished_command(home, url, "resume", trial.run_id, timeout=120)
            assert resumed.code == 0, resumed.stderr
    for state, trial in zip(local.states, remote, strict=True):
        assert_same_run(state, final_state(home, trial.run_id))


def test_a_search_runs_its_trials_on_the_cluster(
    cluster: Any, registry_url: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`rlrun search --ray`, stopped by SIGTERM mid-trial and continued by `rlrun resume search:REF
    --ray`: each trial's session runs on a worker node, and the search is the same search run
    locally: the same parameters, scores and pruning, each complete trial's run bit for bit. The
    pruner's stop reaches a session on its node a moment later than a local one, so a pruned trial's
    run may stop a little after the evaluation that pruned it: resumed to its end, it is the local
    one's run, exactly."""
    spec = str(search_spec(tmp_path))
    homes = {"cluster": tmp_path / "cluster"}
    local = searched_locally(tmp_path_factory, registry_url, spec, *SEARCH)
    argv, environment = command(
        homes["cluster"], registry_url, "search", spec, *SEARCH, "--json", "--ray", cluster.address
    )
    driver = zygote.start(
        argv, environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    wait_for(lambda: list(homes["cluster"].glob("*/s0/checkpoints/f*")), driver)  # trial 0 is training
    driver.send_signal(signal.SIGTERM)
    stopped = finished(driver)
    assert stopped.code == 128 + signal.SIGTERM, stopped.stderr
    remote = resumed_on(cluster, homes["cluster"], registry_url, f"search:{stopped.json()['search_id']}")
    assert not list(homes["cluster"].glob(".rlrun-probe-*")), "the storage check leaves nothing behind"
    assert [t.state for t in remote] == ["complete", "pruned"]
    workers = {n.node_id[:16] for n in cluster.list_all_nodes() if n is not cluster.head_node}
    for trial in remote:
        attempts = detail_of(homes["cluster"], registry_url, trial.run_id).attempts
        assert attempts and all(a.node in workers for a in attempts), "the trial's session ran on a worker node"
    first = detail_of(homes["cluster"], registry_url, remote[0].run_id).attempts
    assert [(a.kind, a.end_status) for a in first] == [("train", "preempted"), ("resume", "finished")]
    pruned = final_state(homes["cluster"], remote[1].run_id)["sessions"][0]
    assert pruned["status"] == "preempted" and pruned["saved"].meta.clock.frame < 10000, "the pruner's stop came"
    assert_same_search(homes["cluster"], registry_url, local, remote)


def test_parallel_trials_on_the_cluster_stopped_then_resumed(
    cluster: Any, registry_url: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`rlrun search --ray --parallel 2`: two trials at a time, each driven from a worker process of
    this machine (a driver of the cluster) and its sessions placed on worker nodes; SIGTERM to the
    command while both train stops both with snapshots (exit 143); `rlrun resume search:REF --ray`
    (two at a time again: recorded with the search) ends each trial, bit for bit, as the search
    run locally one trial at a time (TPE's first suggestions are its seeded random ones, so each
    trial's values depend only on its number)."""
    spec = str(search_spec(tmp_path))
    options = ["--trials", "3", "--pruner", "none", "--set", "meta.max_frame=6000"]
    homes = {"cluster": tmp_path / "cluster"}
    local = searched_locally(tmp_path_factory, registry_url, spec, *options)
    argv, environment = command(
        homes["cluster"], registry_url, "search", spec, *options, "--parallel", "2", "--json", "--ray", cluster.address
    )
    driver = zygote.start(
        argv, environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    wait_for(lambda: runs_snapshotted(homes["cluster"]) >= 2, driver)  # both trials train
    driver.send_signal(signal.SIGTERM)
    stopped = finished(driver)
    assert stopped.code == 128 + signal.SIGTERM, stopped.stderr
    search = f"search:{stopped.json()['search_id']}"
    remote = resumed_on(cluster, homes["cluster"], registry_url, search)
    assert [(t.number, t.params, t.state, t.value) for t in remote] == [
        (t.number, t.params, t.state, t.value) for t in local.trials
    ]
    workers = {n.node_id[:16] for n in cluster.list_all_nodes() if n is not cluster.head_node}
    firsts = []
    for state, y in zip(local.states, remote, strict=True):
        attempts = detail_of(homes["cluster"], registry_url, y.run_id).attempts
        assert attempts and all(a.node in workers for a in attempts), "the trial's session ran on a worker node"
        firsts.append(attempts[0])
        assert_same_run(state, final_state(homes["cluster"], y.run_id))
    assert firsts[0].started_at < firsts[1].ended_at and firsts[1].started_at < firsts[0].ended_at, (
        "trials 0 and 1 trained at the same time"
    )


def runs_snapshotted(home: Path) -> int:
    """How many runs of `home` have a snapshot: trials in flight together (two snapshots of one
    trial would not say both train)."""
    return len({snapshot.parents[2] for snapshot in home.glob("*/s0/checkpoints/f*")})


# A population of two, two generations of 1,000 frames: what the PBT tests on the cluster train.
PBT = ["--scheduler", "pbt", "--population", "2", "--interval", "1000", "--quantile", "0.5"]


def pbt_spec(folder: Path) -> Path:
    document = json.loads(search_spec(folder).read_text())
    document["meta"].update(max_frame=2000, eval_frequency=500, checkpoint_frequency=500, log_frequency=250)
    spec = folder / "pbt.json"
    spec.write_text(json.dumps(document))
    return spec


def assert_same_population_on_workers(
    cluster: Any, homes: dict[str, Path], url: str, local: LocalSearch, remote: list[Any]
) -> None:
    """The cluster's population is the local one, segment for segment (values, state, score), each
    segment's session run on a worker node and its run bit for bit the local one."""
    assert [(t.number, t.params, t.state, t.value) for t in remote] == [
        (t.number, t.params, t.state, t.value) for t in local.trials
    ]
    workers = {n.node_id[:16] for n in cluster.list_all_nodes() if n is not cluster.head_node}
    for state, y in zip(local.states, remote, strict=True):
        attempts = detail_of(homes["cluster"], url, y.run_id).attempts
        assert attempts and all(a.node in workers for a in attempts), "the segment's session ran on a worker node"
        assert_same_run(state, final_state(homes["cluster"], y.run_id))


def test_a_parallel_population_on_the_cluster_is_the_population_trained_locally(
    cluster: Any, registry_url: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`rlrun search --scheduler pbt --ray --parallel 2`: both members' segments of a generation at
    once, each from a worker process of this machine, their sessions on worker nodes: the population
    trained locally one member at a time, segment for segment, each run bit for bit."""
    spec = pbt_spec(tmp_path)
    homes = {"cluster": tmp_path / "cluster"}
    local = searched_locally(tmp_path_factory, registry_url, str(spec), *PBT)
    done = finished_command(
        homes["cluster"], registry_url, "search", str(spec), *PBT, "--parallel", "2", "--json", "--ray", cluster.address
    )
    assert done.code == 0 and "Traceback" not in done.stderr, done.stderr
    remote = trials(homes["cluster"], f"search:{done.json()['search_id']}")
    assert_same_population_on_workers(cluster, homes, registry_url, local, remote)


def test_a_cluster_lost_mid_search_leaves_it_interrupted_and_resume_continues_it(
    cluster: Any, registry_url: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Every worker node lost while trial 0 trains: no node can run its session again, so after the
    liveness limit the search records itself interrupted (not failed), the trial stays running and
    its run preempted with its snapshots; with nodes back, `rlrun resume search:REF --ray` is the
    same search run locally, trial for trial, each run bit for bit."""
    spec = str(search_spec(tmp_path))
    homes = {"cluster": tmp_path / "cluster"}
    local = searched_locally(tmp_path_factory, registry_url, spec, *SEARCH)
    argv, environment = command(
        homes["cluster"],
        registry_url,
        "search",
        spec,
        *SEARCH,
        "--json",
        "--ray",
        cluster.address,
        env={STALE_ENV: "3", HEARTBEAT_ENV: "0.2"},
    )
    driver = zygote.start(
        argv, environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    with losing_a_node(cluster):
        wait_for(lambda: list(homes["cluster"].glob("*/s0/checkpoints/f*")), driver)  # trial 0 is training
        for node in [n for n in cluster.list_all_nodes() if n is not cluster.head_node]:
            cluster.remove_node(node, allow_graceful=False)
        lost = finished(driver)
    assert lost.code == 1 and "Traceback" not in lost.stderr, lost.stderr
    assert "interrupted" in lost.stderr and "the Ray cluster was lost" in lost.stderr, lost.stderr
    search_id = json.loads(lost.stdout)["search_id"]  # stdout is the JSON alone, without Ray's notices
    (interrupted,) = trials(homes["cluster"], f"search:{search_id}")
    assert interrupted.state == "running" and interrupted.run_id is not None
    with Registry.open(homes["cluster"], registry_url, create=False) as registry:
        assert registry.resolve_search(f"search:{search_id}").status == "interrupted"
        assert registry.get_run(interrupted.run_id).run.status == "preempted"
    remote = resumed_on(cluster, homes["cluster"], registry_url, f"search:{search_id}")
    assert remote[0].run_id == interrupted.run_id, "the interrupted trial's run went on"
    assert_same_search(homes["cluster"], registry_url, local, remote)


def test_a_cluster_lost_under_parallel_trials_leaves_the_search_interrupted(
    cluster: Any, registry_url: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Every worker node lost while two trials train at once (`--parallel 2`): each trial's worker
    reports its trial interrupted, not failed; the search ends interrupted (exit 1) with its trials
    running and their runs preempted; with nodes back, `rlrun resume search:REF --ray` ends each
    trial's run as the search run locally, bit for bit."""
    spec = str(search_spec(tmp_path))
    options = ["--trials", "2", "--pruner", "none", "--set", "meta.max_frame=10000"]
    homes = {"cluster": tmp_path / "cluster"}
    local = searched_locally(tmp_path_factory, registry_url, spec, *options)
    argv, environment = command(
        homes["cluster"],
        registry_url,
        "search",
        spec,
        *options,
        "--parallel",
        "2",
        "--json",
        "--ray",
        cluster.address,
        env={STALE_ENV: "3", HEARTBEAT_ENV: "0.2"},
    )
    driver = zygote.start(
        argv, environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    with losing_a_node(cluster):
        wait_for(lambda: runs_snapshotted(homes["cluster"]) >= 2, driver)  # both train
        for node in [n for n in cluster.list_all_nodes() if n is not cluster.head_node]:
            cluster.remove_node(node, allow_graceful=False)
        lost = finished(driver)
    assert lost.code == 1 and "Traceback" not in lost.stderr, lost.stderr
    assert "interrupted" in lost.stderr and "the Ray cluster was lost" in lost.stderr, lost.stderr
    search_id = json.loads(lost.stdout)["search_id"]
    interrupted = trials(homes["cluster"], f"search:{search_id}")
    assert [t.state for t in interrupted] == ["running", "running"], interrupted
    with Registry.open(homes["cluster"], registry_url, create=False) as registry:
        assert registry.resolve_search(f"search:{search_id}").status == "interrupted"
        assert {registry.get_run(t.run_id).run.status for t in interrupted if t.run_id} == {"preempted"}
    remote = resumed_on(cluster, homes["cluster"], registry_url, f"search:{search_id}")
    assert [(t.number, t.params, t.state) for t in remote] == [(t.number, t.params, t.state) for t in local.trials]
    for state, y in zip(local.states, remote, strict=True):
        assert_same_run(state, final_state(homes["cluster"], y.run_id))


# ---------------------------------------------------------------------------------------------
# Detached runs (`--detach`): supervised by an actor on the cluster, not by the command


def detached(home: Path, url: str, cluster: Any, *args: str, env: dict[str, str] | None = None) -> tuple[Any, str]:
    """`rlrun train --ray --detach` (or `resume`, as `args` say), its supervisor on a SUPERVISOR node;
    returned as soon as it prints that the cluster supervises the run, with that line."""
    argv, environment = command(
        home, url, *args, "--ray", cluster.address, "--detach", "--supervisor-on", SUPERVISOR, "--json", env=env
    )
    process = zygote.start(
        argv, environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    said = []
    for line in process.stderr or ():
        if " detached: supervised by actor " in line:
            return process, line
        said.append(line)
    raise AssertionError(f"no detached run ({process.wait(timeout=60)}): {''.join(said)}")


def run_status_of(home: Path, url: str, wanted: str, timeout: float = 240) -> RunDetail:
    """The run once it has ended `wanted`, its end and every attempt's recorded (a run is reported
    finished as soon as its sessions' final snapshots are registered, before their rows close)."""

    def settled() -> RunDetail | None:
        run = detail(home, url)
        recorded = run.run.finished_at is not None and all(a.end_status for a in run.attempts)
        return run if run.run.status == wanted and recorded else None

    found: RunDetail = wait_for(settled, timeout=timeout)
    return found


def supervisor_node(run: RunDetail) -> str:
    found = re.search(r"on node (\w+)", run.run.supervisor or "")
    assert found, run.run.supervisor
    return found[1]


def test_a_detached_run_outlives_its_driver_and_its_supervisors_node(
    cluster: Any, registry_url: str, home: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`rlrun train --ray --detach` is killed (kill -9) right after it says the cluster supervises
    the run (unless it has ended already); then, while the session is frozen mid-run, the node of
    its supervisor (a detached actor) is removed. Ray starts the supervisor again on another node; it
    finds the unfinished session in the registry and runs it again, under a new lease, from its
    newest snapshot: the run finishes bit for bit as the uninterrupted local one, and the frozen
    attempt, woken, writes nothing."""
    a = straight(tmp_path_factory, "reinforce_cartpole")
    flag = tmp_path / "frozen"
    driver, said = detached(
        home,
        registry_url,
        cluster,
        "train",
        "reinforce_cartpole",
        *CADENCE,
        *fast("reinforce_cartpole"),
        "--frames",
        FRAMES,
        env={FREEZE_ENV: f"1500@{flag}"},
    )
    with contextlib.suppress(ProcessLookupError):  # a detached command returns at once: it may have ended
        driver.kill()
    finished(driver)
    run = detail(home, registry_url)
    assert run.run.id in said and run.run.supervisor and run.run.supervisor in said
    frozen = int(wait_for(lambda: flag.exists() and flag.read_text()))
    first = supervisor_node(run)
    with losing_a_node(cluster):
        cluster.remove_node(node_of(cluster, first), allow_graceful=False)
        run = run_status_of(home, registry_url, "finished")
    with contextlib.suppress(ProcessLookupError):
        os.kill(frozen, signal.SIGCONT)  # if Ray has not ended it with its owner: fenced, it writes nothing
    assert supervisor_node(run) != first, "the supervisor was started again on another node"
    ran = [(t.kind, t.start_frame, t.end_status) for t in run.attempts]
    # The retry starts from the newest snapshot before the freeze; on a loaded machine a retry may
    # itself be presumed lost and retried again, each time from its own newest snapshot.
    assert ran[:2] == [("train", 0, "crashed"), ("retry", 1000, ran[1][2])] and ran[-1][2] == "finished", ran
    assert all(kind == "retry" and end == "crashed" for kind, _, end in ran[1:-1]), ran
    leases = [t.lease for t in run.attempts]
    assert all(old is not None and new == old + 1 for old, new in itertools.pairwise(leases)), "a new lease each"
    assert_same_run(a, final_state(home))
    argv, environment = command(home, registry_url, "show", "latest")
    shown = zygote.run(argv, environment, timeout=60)
    assert f"detached: was supervised by actor rlrun/rlrun-{run.run.id}-" in shown.stdout, shown.stdout + shown.stderr


def actor_ended(cluster: Any, label: str, timeout: float = 120) -> bool:
    """Whether the detached supervisor that `label` names (as the registry does) is gone for good
    within `timeout`: Ray forgets the name of an actor ended without restarts, not of one restarting."""
    name = re.search(r"actor rlrun/(\S+) on node", label)
    assert name, label
    probe = (
        "import sys, time, ray\n"
        "ray.init(address=sys.argv[1], namespace='rlrun', logging_level='ERROR', log_to_driver=False)\n"
        "deadline = time.monotonic() + float(sys.argv[3])\n"
        "while time.monotonic() < deadline:\n"
        "    try:\n"
        "        ray.get_actor(sys.argv[2])\n"
        "    except ValueError:\n"
        "        sys.exit(0)\n"
        "    time.sleep(0.5)\n"
        "sys.exit(1)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, cluster.address, name[1], str(timeout)],
        env={**os.environ, **ISOLATED},
        capture_output=True,
        text=True,
        timeout=timeout + 60,
    )
    return done.returncode == 0


def test_a_supervisor_restarted_after_a_resume_took_its_run_over_leaves_it_alone(
    cluster: Any, registry_url: str, home: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A detached run loses its supervisor's node, and Ray can place the supervisor nowhere else
    for a while (every node that may host it is gone). Meanwhile `rlrun resume --ray` continues the
    run in the foreground. When a node comes back and Ray starts the supervisor again, it finds the
    run taken over and ends for good, submitting nothing: the resume's session, held mid-run while
    it happens, keeps its lease, no retry is recorded, the record names the resume as the launcher,
    and the run ends bit for bit as the uninterrupted one."""
    a = straight(tmp_path_factory, "reinforce_cartpole")
    frozen_flag, held = tmp_path / "frozen", tmp_path / "held"
    driver, _ = detached(
        home,
        registry_url,
        cluster,
        "train",
        "reinforce_cartpole",
        *CADENCE,
        *fast("reinforce_cartpole"),
        "--frames",
        FRAMES,
        env={FREEZE_ENV: f"1500@{frozen_flag}"},
    )
    assert finished(driver).code == 0
    frozen = int(wait_for(lambda: frozen_flag.exists() and frozen_flag.read_text()))
    label = detail(home, registry_url).run.supervisor
    assert label
    hosts = [n for n in cluster.list_all_nodes() if dict(n._ray_params.resources or {}).get(SUPERVISOR)]
    with losing_a_node(cluster):
        for node in hosts:
            cluster.remove_node(node, allow_graceful=False)
        with contextlib.suppress(ProcessLookupError):
            os.kill(frozen, signal.SIGKILL)  # the lost attempt's worker, if Ray left it: its session is crashed now
        # Gone, not dying: a process still tearing itself down is alive to the resume's liveness check,
        # which then (rightly) refuses a run still running; on a busy machine that takes a while.
        wait_for(lambda: not pid_alive(frozen))
        # The held session does not beat: a watch that presumes it lost after 60 s leaves the test time.
        argv, environment = command(
            home,
            registry_url,
            "resume",
            "latest",
            "--ray",
            cluster.address,
            env={HOLD_ENV: f"2500@{held}", HEARTBEAT_ENV: "0.5", STALE_ENV: "60"},
        )
        resumed = zygote.start(
            argv, environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        wait_for(held.exists, resumed)
        assert detail(home, registry_url).run.supervisor is None, "the resume took the run over"
        cluster.add_node(num_cpus=0, resources={SUPERVISOR: 1})
        cluster.wait_for_nodes()
        assert actor_ended(cluster, label), "the restarted supervisor ended for good"
        held.unlink()
        done = finished(resumed)
        assert done.code == 0, done.stderr
    run = run_status_of(home, registry_url, "finished")
    assert [t.kind for t in run.attempts] == ["train", "resume"], "the restarted supervisor ran no attempt"
    assert run.attempts[1].end_status == "finished"
    assert (run.run.supervisor, run.run.pid) == (None, resumed.pid)
    assert_same_run(a, final_state(home))


def test_a_live_supervisor_leaves_the_run_a_resume_took_over(
    cluster: Any, registry_url: str, home: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A detached run's session freezes mid-run; before its supervisor presumes the attempt lost
    (after half a minute), `rlrun resume --ray` sees the session silent (after 3 s, as told) and
    continues the run in the foreground. The supervisor, still alive, sees within a second that
    the record no longer names it, cancels its attempt and ends for good: it retries nothing, and
    the run ends bit for bit as the uninterrupted one under the resume alone."""
    a = straight(tmp_path_factory, "reinforce_cartpole")
    flag = tmp_path / "frozen"
    driver, _ = detached(
        home,
        registry_url,
        cluster,
        "train",
        "reinforce_cartpole",
        *CADENCE,
        *fast("reinforce_cartpole"),
        "--frames",
        FRAMES,
        env={FREEZE_ENV: f"1500@{flag}"},
    )
    assert finished(driver).code == 0
    frozen = int(wait_for(lambda: flag.exists() and flag.read_text()))
    label = detail(home, registry_url).run.supervisor
    assert label
    time.sleep(3.5)
    done = finished_command(
        home, registry_url, "resume", "latest", "--ray", cluster.address, env={STALE_ENV: "3", HEARTBEAT_ENV: "0.5"}
    )
    assert done.code == 0, done.stderr
    assert actor_ended(cluster, label, timeout=30), "the supervisor left the run to the resume"
    with contextlib.suppress(ProcessLookupError):
        os.kill(frozen, signal.SIGCONT)  # if Ray has not ended it with the cancel: fenced, it writes nothing
    run = run_status_of(home, registry_url, "finished")
    assert [t.kind for t in run.attempts] == ["train", "resume"], "the supervisor retried nothing"
    assert run.run.supervisor is None
    assert_same_run(a, final_state(home))


def test_a_supervisor_resource_no_node_offers_is_bad_input(cluster: Any, registry_url: str, home: Path) -> None:
    """`--supervisor-on RESOURCE` that no live node offers: one line naming it and how to offer it,
    exit 2, before anything is written (Ray would otherwise wait for such a node for ever)."""
    argv, environment = command(
        home,
        registry_url,
        "train",
        "reinforce_cartpole",
        "--ray",
        cluster.address,
        "--detach",
        "--supervisor-on",
        "on_demand",
    )
    done = zygote.run(argv, environment, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "no live node of the Ray cluster offers the resource on_demand" in lines[0], lines
    assert "ray start --resources" in lines[0] and "Traceback" not in done.stderr
    with Registry.open(home, registry_url) as registry:
        assert registry.list_runs(limit=None) == []


def test_rlrun_stop_ends_a_detached_run_with_snapshots_and_resume_continues_it(
    cluster: Any, registry_url: str, home: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`rlrun stop` on a detached run (its session frozen mid-run meanwhile, so the stop comes
    before its end): the session stops at its next heartbeat with a snapshot and is not retried,
    the run is preempted; a second stop changes nothing, a third one (the run ended) says so; all
    exit 0. `rlrun resume --ray --detach` continues it bit for bit."""
    a = straight(tmp_path_factory, "reinforce_cartpole")
    flag = tmp_path / "frozen"
    driver, _ = detached(
        home,
        registry_url,
        cluster,
        "train",
        "reinforce_cartpole",
        *CADENCE,
        *fast("reinforce_cartpole"),
        "--frames",
        FRAMES,
        env={FREEZE_ENV: f"1500@{flag}", HEARTBEAT_ENV: "0.5"},
    )
    assert finished(driver).code == 0
    frozen = int(wait_for(lambda: flag.exists() and flag.read_text()))
    environment = Path(f"/proc/{frozen}/environ").read_bytes().split(b"\0")
    assert b"OMP_WAIT_POLICY=PASSIVE" in environment, "the command's OpenMP policy reached the session's worker"

    def stop() -> Result:
        argv, environment = command(home, registry_url, "stop", "latest")
        done = zygote.run(argv, environment, timeout=60)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        return Result(done.returncode, done.stdout, done.stderr)

    assert "stop requested" in stop().stderr
    assert "a stop was already requested" in stop().stderr
    os.kill(frozen, signal.SIGCONT)
    run = run_status_of(home, registry_url, "preempted")
    assert [(t.kind, t.end_status) for t in run.attempts] == [("train", "preempted")], "stopped, not retried"
    newest = max(run.checkpoints, key=lambda c: c.frame)
    # At the stop frame: a "preempt" snapshot, or the scheduled one the stop came right after.
    assert 1500 <= newest.frame == run.sessions[0].frame < 3000 and (
        newest.kind == "preempt" or newest.frame % 1000 == 0
    )
    assert "is preempted: nothing to stop" in stop().stderr
    resumed, _ = detached(home, registry_url, cluster, "resume", "latest")
    assert finished(resumed).code == 0
    run = run_status_of(home, registry_url, "finished")
    assert [(t.kind, t.end_status) for t in run.attempts] == [("train", "preempted"), ("resume", "finished")]
    assert run.run.stop_requested_at is None, "resume clears the stop"
    assert_same_run(a, final_state(home))


def test_a_detached_search_outlives_its_command_and_its_drivers_node(
    cluster: Any, registry_url: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`rlrun search --ray --detach` returns at once: an actor on the cluster drives the search.
    While trial 0's session is frozen mid-run, the actor's node is removed (the session ends with it). Ray starts
    the driver again on another node; it waits until the search reads crashed, takes it over and
    continues it: the search is the one run locally, trial for trial, each trial's run bit for bit."""
    spec = str(search_spec(tmp_path))
    homes = {"cluster": tmp_path / "cluster"}
    local = searched_locally(tmp_path_factory, registry_url, spec, *SEARCH)
    flag = tmp_path / "frozen"
    done = finished_command(
        homes["cluster"],
        registry_url,
        "search",
        spec,
        *SEARCH,
        "--json",
        "--ray",
        cluster.address,
        "--detach",
        "--supervisor-on",
        SUPERVISOR,
        env={STALE_ENV: "3", HEARTBEAT_ENV: "0.5", FREEZE_ENV: f"1500@{flag}"},
    )
    assert done.code == 0 and "Traceback" not in done.stderr, done.stderr
    search_id = done.json()["search_id"]
    assert done.json()["detached"] and done.json()["status"] == "running"
    said = re.search(r"detached: driven by actor rlrun/rlrun-search-\w+-\w+ on node (\w+)", done.stderr)
    assert said, done.stderr
    frozen = int(wait_for(lambda: flag.exists() and flag.read_text()))  # trial 0's session, mid-run
    with losing_a_node(cluster):
        cluster.remove_node(node_of(cluster, said[1]), allow_graceful=False)
        with contextlib.suppress(ProcessLookupError):
            os.kill(frozen, signal.SIGKILL)  # if Ray has not ended it with its owner

        def ended() -> bool:
            with Registry.open(homes["cluster"], registry_url, create=False) as registry:
                return registry.resolve_search(f"search:{search_id}").status not in ("running", "crashed")

        wait_for(ended, timeout=300)
    with Registry.open(homes["cluster"], registry_url, create=False) as registry:
        assert registry.resolve_search(f"search:{search_id}").status == "finished"
    remote = trials(homes["cluster"], f"search:{search_id}")
    first = detail_of(homes["cluster"], registry_url, remote[0].run_id).attempts
    assert [a.kind for a in first] == ["train", "resume"], "trial 0 went on from its snapshot under the new driver"
    assert_same_search(homes["cluster"], registry_url, local, remote)


@pytest.mark.parametrize("stopping", ["its trial's run", "the search"])
def test_a_detached_search_stopped_then_resumed_detached(
    cluster: Any, registry_url: str, tmp_path: Path, stopping: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`rlrun stop` of a detached search's trial in flight, or of the search (`rlrun stop
    search:REF`, which its driver on the cluster reads with its heartbeat), ends the search
    preempted (its driver ends for good); `rlrun resume search:REF --ray --detach` hands it to a
    new driver, which continues it to the end: the search run locally, trial for trial, each
    trial's run bit for bit."""
    spec = str(search_spec(tmp_path))
    homes = {"cluster": tmp_path / "cluster"}
    local = searched_locally(tmp_path_factory, registry_url, spec, *SEARCH)
    done = finished_command(
        homes["cluster"],
        registry_url,
        "search",
        spec,
        *SEARCH,
        "--json",
        "--ray",
        cluster.address,
        "--detach",
        "--supervisor-on",
        SUPERVISOR,
        env={HEARTBEAT_ENV: "0.5"},
    )
    assert done.code == 0, done.stderr
    search = f"search:{done.json()['search_id']}"
    wait_for(lambda: list(homes["cluster"].glob("*/s0/checkpoints/f*")))  # trial 0 is training
    (trial,) = trials(homes["cluster"], search)
    stopped = finished_command(
        homes["cluster"], registry_url, "stop", search if stopping == "the search" else trial.run_id
    )
    assert stopped.code == 0 and "stop requested" in stopped.stderr, stopped.stderr
    if stopping == "the search":  # the hint continues it the way it ran: detached again
        assert f"`rlrun resume {search} --ray --detach" in stopped.stderr, stopped.stderr

    def status() -> str:
        with Registry.open(homes["cluster"], registry_url, create=False) as registry:
            return registry.resolve_search(search).status

    wait_for(lambda: status() == "preempted")
    resumed = finished_command(
        homes["cluster"],
        registry_url,
        "resume",
        search,
        "--ray",
        cluster.address,
        "--detach",
        "--supervisor-on",
        SUPERVISOR,
        "--json",
    )
    assert resumed.code == 0 and resumed.json()["detached"], resumed.stderr
    wait_for(lambda: status() == "finished", timeout=300)
    remote = trials(homes["cluster"], search)
    first = detail_of(homes["cluster"], registry_url, remote[0].run_id).attempts
    assert [(a.kind, a.end_status) for a in first] == [("train", "preempted"), ("resume", "finished")]
    assert_same_search(homes["cluster"], registry_url, local, remote)


def test_a_pbt_population_on_the_cluster_killed_and_resumed(
    cluster: Any, registry_url: str, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`rlrun search --scheduler pbt --ray`: every member's segment runs its session on a worker node;
    kill -9 of the driver mid-population (Ray ends its tasks), then `rlrun resume search:REF --ray`:
    the same population as run locally, segment for segment, each run bit for bit."""
    spec = pbt_spec(tmp_path)
    homes = {"cluster": tmp_path / "cluster"}
    local = searched_locally(tmp_path_factory, registry_url, str(spec), *PBT)
    argv, environment = command(
        homes["cluster"], registry_url, "search", str(spec), *PBT, "--json", "--ray", cluster.address
    )
    driver = zygote.start(
        argv, environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    wait_for(lambda: len(list(homes["cluster"].glob("*/s0/checkpoints/f*"))) >= 5, driver)  # in generation 1
    os.kill(driver.pid, signal.SIGKILL)
    finished(driver)
    argv, environment = command(homes["cluster"], registry_url, "ls", "--json")

    def settled() -> bool:
        listed = zygote.run(argv, environment, timeout=60)
        return all(run["status"] != "running" for run in json.loads(listed.stdout or "[]"))

    wait_for(settled, timeout=90)
    remote = resumed_on(cluster, homes["cluster"], registry_url, "search:latest")
    assert_same_population_on_workers(cluster, homes, registry_url, local, remote)
