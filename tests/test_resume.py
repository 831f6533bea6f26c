"""Exact resume: an interrupted-then-resumed run is, bit for bit, the run that was never interrupted.

For every algorithm (through a built-in spec that uses it), run A trains straight to the budget in
one process; run B is interrupted — a clean finish at half the budget, a SIGTERM mid-episode, a
kill -9 of its process group, a kill in the middle of writing a snapshot — and resumed in new
processes. A and B must end with equal weights, optimiser state, clock, metrics log and
evaluations at every scheduled evaluation (wall-clock fields aside).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zygote
from helpers import builtin_for, cli_env, fast, invoke, rlrun
from same_run import (
    ALGORITHMS,
    BUDGET,
    CADENCE,
    assert_same_run,
    final_state,
    killed_after_a_snapshot,
    log_items,
    newest_checkpoint_frame,
    reference,
    reference_state,
    resume_ok,
    train,
    wait_for,
)

from rlrun import snapshot
from rlrun.registry import Registry
from rlrun.spec import builtin_document, builtin_names
from rlrun.testhooks import FREEZE_ENV, HANG_ENV, HEARTBEAT_ENV, SIGNAL_AT_ENV

pytestmark = pytest.mark.slow  # real trainings in subprocesses


def test_every_algorithm_has_a_builtin_spec() -> None:
    assert {builtin_document(n)["agent"]["algorithm"] for n in builtin_names()} >= set(ALGORITHMS)


@pytest.fixture(scope="module", params=ALGORITHMS)
def straight(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    """Run A: the uninterrupted run, trained once per algorithm (and test run: `reference`)."""
    spec = builtin_for(request.param)
    return spec, reference_state(tmp_path_factory, spec, "--frames", str(BUDGET))


# Each interruption in object storage on one algorithm (the store's paths are the same for all):
# a replay memory's segments shared by reference, a rollout stopped mid-episode, a kill -9.
@pytest.mark.any_home(store_only={"straight": "dqn"})
def test_clean_finish_then_longer_budget(straight: tuple[str, dict[str, Any]], home: Path) -> None:
    spec, a = straight
    assert train(home, spec, "--frames", str(BUDGET // 2)).code == 0
    resumed = resume_ok(home, "latest", "--frames", str(BUDGET))
    assert f"from snapshot at frame {BUDGET // 2:,}" in resumed.stderr
    assert_same_run(a, final_state(home))
    with Registry.open(home, create=False) as registry:
        detail = registry.get_run(registry.resolve("latest").id)
    assert [(r.revision, r.frame) for r in detail.spec_revisions] == [(0, 0), (1, BUDGET // 2)]
    assert json.loads(detail.spec_revisions[1].diff_json) == [
        {"path": "meta.max_frame", "old": BUDGET // 2, "new": BUDGET}
    ]
    assert [(t.kind, t.start_frame, t.approximate) for t in detail.attempts] == [
        ("train", 0, False),
        ("resume", BUDGET // 2, False),
    ]


@pytest.mark.any_home(store_only={"straight": "ppo"})
def test_sigterm_mid_episode(straight: tuple[str, dict[str, Any]], home: Path) -> None:
    spec, a = straight
    stopped = train(home, spec, "--frames", str(BUDGET), env={SIGNAL_AT_ENV: "2345"})
    assert stopped.code == 128 + signal.SIGTERM, stopped.stderr
    assert "stopped by signal 15" in stopped.stderr and "Traceback" not in stopped.stderr
    with Registry.open(home, create=False) as registry:
        detail = registry.get_run(registry.resolve("latest").id)
    assert detail.run.status == "preempted" and {s.status for s in detail.sessions} == {"preempted"}
    newest = max(detail.checkpoints, key=lambda c: c.frame)
    assert newest.kind == "preempt" and 2345 <= newest.frame < 2345 + 16
    assert any(length > 0 for length in snapshot.read_meta(home / newest.path).episode_length), "not mid-episode"
    resume_ok(home)
    assert_same_run(a, final_state(home))


@pytest.mark.any_home(store_only={"straight": "a2c"})
def test_kill_9_of_the_process_group(straight: tuple[str, dict[str, Any]], home: Path) -> None:
    spec, a = straight
    killed_after_a_snapshot(home, spec, "--frames", str(BUDGET), frame=3000)
    listed = rlrun(home, "ls", "--json").json()
    assert listed[0]["status"] == "crashed"
    assert rlrun(home, "show", "latest", "--json").json()["run"]["status"] == "crashed"
    resume_ok(home, "latest")
    assert_same_run(a, final_state(home))


def test_a_snapshot_torn_by_a_kill_is_never_used(straight: tuple[str, dict[str, Any]], home: Path) -> None:
    spec, a = straight
    process = zygote.start(
        ["train", spec, *CADENCE, *fast(spec), "--frames", str(BUDGET)],
        env={**cli_env(home), HANG_ENV: snapshot.snapshot_name(5000)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    torn: list[Path] = []
    wait_for(lambda: bool(torn.extend(home.glob("*/s0/checkpoints/.f000000005000.tmp-*/state.pt")) or torn), process)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    assert newest_checkpoint_frame(home) == 4000  # the torn one never reached the registry
    resumed = resume_ok(home)
    assert "from snapshot at frame 4,000" in resumed.stderr
    assert not torn[0].parent.exists(), "the torn snapshot was not swept away"
    assert_same_run(a, final_state(home))


def test_sigterm_to_a_multi_session_run_stops_every_session(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The launching process gets the signal (as from SLURM or Kubernetes); its spawned sessions
    each stop at a step boundary with a snapshot, and the resumed run equals the straight one."""
    spec, args = builtin_for(ALGORITHMS[0]), ["--frames", str(BUDGET), "--sessions", "2"]
    straight_home, home = reference(tmp_path_factory, spec, *args), tmp_path / "stopped"
    process = zygote.start(
        ["train", spec, *CADENCE, *fast(spec), *args],
        env=cli_env(home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    seen: set[str] = set()
    for line in process.stderr:
        if " frame " in line:
            seen.add(line.split()[0])
        if seen == {"s0", "s1"}:
            break
    process.send_signal(signal.SIGTERM)
    rest = process.communicate(timeout=120)[1]
    assert process.returncode == 128 + signal.SIGTERM, rest
    with Registry.open(home, create=False) as registry:
        detail = registry.get_run(registry.resolve("latest").id)
    assert [s.status for s in detail.sessions] == ["preempted", "preempted"]
    # Each stop is saved at the frame the session stopped (as a "preempt" snapshot, or the scheduled
    # one that the session had just written at that very frame).
    for session in detail.sessions:
        assert max(c.frame for c in detail.checkpoints if c.session_index == session.index) == session.frame
    resume_ok(home)
    assert_same_run(final_state(straight_home), final_state(home))


def test_async_copies_are_captured_in_their_workers(tmp_path: Path) -> None:
    """Copies stepped in subprocesses (`vectorization: async`) are captured inside each worker, so
    the resume is exact and the registry says how the env came back. (An env that can be neither
    captured nor replayed: `test_resume_envs.py`.)"""
    home, spec = tmp_path / "async", builtin_for("ppo")
    assert train(home, spec, "--frames", "3000", "--set", "env.vectorization=async").code == 0
    resume_ok(home, "--frames", "6000")
    with Registry.open(home, create=False) as registry:
        detail = registry.get_run(registry.resolve("latest").id)
    assert detail.run.status == "finished" and {s.frame for s in detail.sessions} == {6000}
    train_attempt, resume_attempt = detail.attempts
    assert not train_attempt.approximate and not resume_attempt.approximate
    assert resume_attempt.note == "env: captured"


@pytest.mark.parametrize("algorithm", [a for a in ALGORITHMS if a in ("dqn", "sac")])
def test_replay_memory_left_out_of_snapshots_refills_and_is_approximate(algorithm: str, tmp_path: Path) -> None:
    home, spec = tmp_path / "no-memory", builtin_for(algorithm)
    assert train(home, spec, "--frames", "3000", "--set", "agent.memory.snapshot=false").code == 0
    with Registry.open(home, create=False) as registry:
        newest = max(registry.get_run(registry.resolve("latest").id).checkpoints, key=lambda c: c.frame)
    assert not (home / newest.path / "arrays").exists() and not (home / newest.path / "logs").exists()
    resume_ok(home, "--frames", "4000")
    with Registry.open(home, create=False) as registry:
        attempts = registry.get_run(registry.resolve("latest").id).attempts
    assert [a.approximate for a in attempts] == [False, True]
    assert "replay memory not in the snapshot" in (attempts[1].note or "")


def test_replay_memory_is_in_the_snapshot_as_shared_segments(tmp_path: Path) -> None:
    """Each frame once, in the env's dtype; the second snapshot writes only the rows added since
    the first and hard-links the first's segments."""
    home, spec = tmp_path / "memory", builtin_for("dqn")
    assert train(home, spec, "--frames", "2000").code == 0
    with Registry.open(home, create=False) as registry:
        first, newest = sorted(registry.get_run(registry.resolve("latest").id).checkpoints, key=lambda c: c.frame)
    saved = snapshot.read(home / newest.path, newest.sha256)
    assert not saved.arrays and set(saved.logs) == {"rows", "frames"}
    rows, frames = log_items(saved.logs["rows"]), log_items(saved.logs["frames"])
    assert len(rows) == 2000 and rows.dtype.names == ("obs", "next", "action", "reward", "terminated")
    assert frames.dtype == np.float32 and frames.shape[1:] == (4,)  # CartPole's own observations
    assert 2000 < len(frames) < 2 * 2000, "one frame per row, plus one per episode start"
    shared = {p.name for p in (home / newest.path / "logs").iterdir() if p.stat().st_nlink == 2}
    assert shared and shared <= {p.name for p in (home / first.path / "logs").iterdir()}
    assert all(
        int(name.split(".")[1].split("-")[0]) >= 1000
        for name in {p.name for p in (home / newest.path / "logs").glob("rows.*")} - shared
    )


def test_rlrun_stop_stops_a_local_run_with_snapshots_and_resume_is_exact(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """`rlrun stop` from another terminal, on a local run of two session processes (one of them
    frozen, so the stop comes before its end): the sessions read the request with their heartbeat
    and stop with a snapshot, as after SIGTERM (exit 143); a second stop says there is nothing
    left to stop; `rlrun resume` continues the run bit for bit."""
    spec, args = "reinforce_cartpole", ("--frames", "3000", "--sessions", "2")
    home, flag = tmp_path / "b", tmp_path / "frozen"
    process = zygote.start(
        ["train", spec, *CADENCE, *fast(spec), *args],
        env={**cli_env(home), FREEZE_ENV: f"1500@{flag}", HEARTBEAT_ENV: "0.5"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: flag.exists() and flag.read_text(), process)
    stopped = invoke(home, "stop", "latest")
    assert stopped.code == 0 and "stop requested" in stopped.stderr, stopped.stderr
    # frozen past a heartbeat's interval, so it beats (and reads the stop) as it wakes: woken at
    # once on a quick machine, it could finish its last 1,500 frames (0.15 s) before its next beat
    time.sleep(1)
    os.kill(int(flag.read_text()), signal.SIGCONT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, stderr
    with Registry.open(home, create=False) as registry:
        detail = registry.get_run(registry.resolve("latest").id)
    assert detail.run.status == "preempted" and "preempted" in {s.status for s in detail.sessions}
    again = invoke(home, "stop", "latest")
    assert again.code == 0 and "is preempted: nothing to stop" in again.stderr, again.stderr
    resume_ok(home, "latest")
    assert_same_run(reference_state(tmp_path_factory, spec, *args), final_state(home))
    assert "nothing to stop" in invoke(home, "stop", "latest").stderr
