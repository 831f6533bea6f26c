"""Resume and signals at the edges (issue 16): a damaged newest snapshot, a SIGTERM during start-up
or after the work is done, children left behind by a graceful stop, and `resume` requeued on a run
that is already done. Real trainings at tiny budgets, real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import zygote
from helpers import cli_env, invoke, rlrun, snapshot_of

pytestmark = pytest.mark.slow  # every test trains (tiny budgets, real processes and signals)

SMALL = [
    "--frames",
    "1500",
    "--set",
    "meta.checkpoint_frequency=500",
    "--set",
    "meta.eval_frequency=500",
    "--set",
    "meta.num_eval_episodes=2",
    "--set",
    "meta.log_frequency=500",
]


def trained(home: Path, *extra: str) -> str:
    """A finished run of 1.5k frames with snapshots at 500, 1k and 1.5k; returns its id."""
    done = invoke(home, "train", "reinforce_cartpole", *SMALL, *extra)
    assert done.code == 0, done.stderr[-3000:]
    return str(rlrun(home, "ls", "--json").json()[0]["id"])


def damage(snapshot: Path) -> None:
    """Flip one bit of the snapshot's weights, leaving its manifest intact."""
    state = snapshot / "state.pt"
    data = bytearray(state.read_bytes())
    data[200] ^= 1
    state.write_bytes(bytes(data))


def snapshots(home: Path, run_id: str) -> list[Path]:
    return sorted((home / run_id / "s0" / "checkpoints").iterdir())


def test_a_damaged_newest_snapshot_is_skipped_with_a_warning(home: Path) -> None:
    run_id = trained(home)
    older, newest = snapshots(home, run_id)[-2:]
    damage(newest)
    resumed = invoke(home, "resume", "latest", "--more", "500")
    assert resumed.code == 0, resumed.stderr[-3000:]
    warning = next(line for line in resumed.stderr.splitlines() if "warning:" in line)
    assert newest.name in warning and "altered" in warning
    assert str(older.relative_to(home)) in resumed.stderr and "frame 1,000" in resumed.stderr
    shown = rlrun(home, "show", run_id, "--json").json()
    assert shown["run"]["status"] == "finished" and shown["sessions"][0]["frame"] == 2000
    again = invoke(home, "resume", "latest", "--more", "500")  # the damaged one was rewound away
    assert again.code == 0, again.stderr[-3000:]


def test_no_intact_snapshot_refuses_and_changes_nothing(home: Path) -> None:
    run_id = trained(home)
    for snapshot in snapshots(home, run_id):
        damage(snapshot)
    before = snapshot_of(home)
    refused = invoke(home, "resume", "latest", "--more", "500")
    assert refused.code == 2
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert refused.stderr.startswith(f"error: run {run_id} session s0 has no intact snapshot")
    assert snapshot_of(home) == before
    assert rlrun(home, "ls", "--json").json()[0]["status"] == "finished"


def test_resume_of_a_finished_run_is_nothing_to_do(home: Path) -> None:
    run_id = trained(home)
    before = snapshot_of(home)
    for args in ((), ("--frames", "1500"), ("--json",)):
        again = invoke(home, "resume", run_id, *args)
        assert again.code == 0, again.stderr
        assert f"nothing to do: run {run_id} has trained 1,500 of its 1,500 frames" in again.stderr
    assert again.json()["nothing_to_do"] is True and again.json()["status"] == "finished"
    assert snapshot_of(home) == before


def test_a_finished_run_with_a_damaged_final_snapshot_is_still_done(home: Path) -> None:
    run_id = trained(home)
    damage(snapshots(home, run_id)[-1])
    before = snapshot_of(home)
    again = invoke(home, "resume", run_id)
    assert again.code == 0 and "nothing to do" in again.stderr, again.stderr
    assert snapshot_of(home) == before


def start(home: Path, *args: str) -> subprocess.Popen[str]:
    """`rlrun ARGS` as the leader of its own process group, so every process it starts can be found."""
    return zygote.start(
        [*args], env=cli_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("delay", [0.0, 0.5, 1.5])
def test_sigterm_during_start_up_is_a_graceful_stop(home: Path, delay: float) -> None:
    trained(home)  # the registry exists, so `ls` has something to say either way
    before = snapshot_of(home)
    process = start(home, "train", "reinforce_cartpole", *SMALL)
    time.sleep(delay)
    process.send_signal(signal.SIGTERM)
    _, errors = process.communicate(timeout=120)
    assert not group_alive(process.pid)
    if delay == 0.0 and process.returncode == -signal.SIGTERM:
        # The first ~50 ms the interpreter itself starts, before any rlrun code can take a signal;
        # killed there, the command has written nothing.
        assert snapshot_of(home) == before
        return
    assert process.returncode in (0, 128 + signal.SIGTERM), errors[-3000:]
    runs = rlrun(home, "ls", "--json").json()
    if len(runs) == 1:  # stopped before the run was recorded
        assert errors.strip().splitlines()[-1].endswith("nothing was written")
        assert snapshot_of(home) == before
        return
    newest = runs[0]
    assert newest["status"] in ("preempted", "finished"), newest
    resumed = invoke(home, "resume", newest["id"])
    assert resumed.code == 0, resumed.stderr[-3000:]
    assert rlrun(home, "show", newest["id"], "--json").json()["run"]["status"] == "finished"


def test_a_sigterm_as_the_interpreter_shuts_down_after_a_training_changes_nothing(home: Path) -> None:
    """The last window: a real training's process (torch's threads alive) gets SIGTERM while the
    interpreter frees its modules, after the default actions are back: it ends 0, run finished."""
    script = textwrap.dedent("""
        import os, signal, sys
        from rlrun.cli import main

        class SigtermAtShutdown:
            def __del__(self) -> None:
                os.kill(os.getpid(), signal.SIGTERM)

        sys.modules["__main__"].late = SigtermAtShutdown()
        sys.argv = ["rlrun", "train", "ppo_cartpole", "--frames", "2k"]
        main()
    """)
    ended = subprocess.run(
        [sys.executable, "-c", script], env=cli_env(home), capture_output=True, text=True, timeout=300
    )
    assert ended.returncode == 0, ended.stderr[-3000:]
    assert rlrun(home, "ls", "--json").json()[0]["status"] == "finished"


def wait_until_both_sessions_train(home: Path, process: subprocess.Popen[str], timeout: float = 300) -> None:
    """Until the registry shows both sessions past frame 0 (a fixed sleep was not enough on a busy
    machine: the signal then came during start-up, a graceful stop before the run was recorded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        shown = rlrun(home, "show", "latest", "--json")
        if shown.code == 0 and all(s["frame"] > 0 for s in shown.json()["sessions"]):
            return
        time.sleep(1)
    raise AssertionError(f"the sessions did not start training within {timeout} s")


def test_a_graceful_stop_of_two_sessions_leaves_no_process_behind(home: Path) -> None:
    process = start(
        home,
        "train",
        "reinforce_cartpole",
        "--frames",
        "100M",
        "--sessions",
        "2",
        "--set",
        "meta.checkpoint_frequency=1000000",
    )
    wait_until_both_sessions_train(home, process)
    process.send_signal(signal.SIGTERM)
    _, errors = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, errors[-3000:]
    assert not group_alive(process.pid), "a child of the stopped command is still alive"
    assert "Traceback" not in errors and "Exception ignored" not in errors, errors[-3000:]
    sessions = rlrun(home, "show", "latest", "--json").json()["sessions"]
    assert [s["status"] for s in sessions] == ["preempted", "preempted"]


def test_sigterm_after_every_session_finished_exits_0(home: Path) -> None:
    process = start(home, "train", "reinforce_cartpole", *SMALL)
    assert process.stderr is not None
    for line in process.stderr:
        if "finished at frame" in line:  # the session has ended; the command is closing the run
            process.send_signal(signal.SIGTERM)
            break
    _, errors = process.communicate(timeout=120)
    assert process.returncode == 0, errors[-3000:]
    assert rlrun(home, "ls", "--json").json()[0]["status"] == "finished"


def test_an_attempt_that_ends_by_exception_is_closed(home: Path) -> None:
    run_id = trained(home)
    checkpoints = home / run_id / "s0" / "checkpoints"
    (checkpoints / "f000000002000").write_text("in the way")  # the resumed session's next snapshot fails
    failed = invoke(home, "resume", run_id, "--more", "500")
    assert failed.code == 1, failed.stderr[-3000:]
    shown = rlrun(home, "show", run_id, "--json").json()
    session = shown["sessions"][0]
    assert session["status"] == "failed" and "FileExistsError" in session["error"] and session["frame"] >= 1500
    last = shown["attempts"][-1]
    assert last["kind"] == "resume" and last["ended_at"] is not None and last["end_status"] == "failed", last
