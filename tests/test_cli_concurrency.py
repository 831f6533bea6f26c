"""Eight processes on one SQLite registry for half a minute: a 6-session training (the launcher and six
session processes, each evaluating, snapshotting and heartbeating several times a second) and a
process listing and showing runs in a loop. No lock errors anywhere, and no row lost: every
evaluation and snapshot a session made is in the registry."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import cli_env, popen

from rlrun.registry import Registry

pytestmark = pytest.mark.slow  # real trainings in subprocesses

SESSIONS = 6  # + the launcher + the listing loop = 8 processes
SECONDS = 30.0  # several thousand registry writes and reads; it held the machine's two cores for a minute
EVAL_EVERY = 500
CADENCE = ["--set", f"meta.eval_frequency={EVAL_EVERY}", "--set", "meta.num_eval_episodes=1", "--set",
           "meta.checkpoint_frequency=1000", "--set", "meta.keep_checkpoints=2", "--set", "meta.log_frequency=1000"]

LISTING = """
import json, sys, time
from pathlib import Path
from rlrun.refs import RunFilter
from rlrun.registry import Registry

home, seconds = Path(sys.argv[1]), float(sys.argv[2])
counts = {"listings": 0, "shows": 0, "errors": []}
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    try:
        with Registry.open(home, create=False) as registry:
            listed = registry.list_runs(limit=None)
            registry.count_runs(RunFilter(status="running"))
            registry.list_runs(filters=RunFilter(sort="best"))
            counts["listings"] += 1
            if listed:
                detail = registry.get_run(registry.resolve("latest").id)
                assert len(detail.sessions) == detail.run.num_sessions
                counts["shows"] += 1
    except Exception as error:
        counts["errors"].append(f"{type(error).__name__}: {error}")
print(json.dumps(counts))
"""


@pytest.mark.slow
def test_eight_processes_for_half_a_minute_lose_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "runs"
    training = popen(home, "train", "reinforce_cartpole", "--frames", "100M", "--sessions", str(SESSIONS), *CADENCE)
    listing = subprocess.Popen([sys.executable, "-c", LISTING, str(home), str(SECONDS)], env=cli_env(home),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    time.sleep(SECONDS)
    training.send_signal(signal.SIGTERM)  # a graceful stop: every session saves a snapshot
    _, training_errors = training.communicate(timeout=300)
    listed_out, listing_errors = listing.communicate(timeout=120)
    assert training.returncode == 128 + signal.SIGTERM, training_errors[-3000:]
    assert listing.returncode == 0, listing_errors[-3000:]
    counts = json.loads(listed_out)
    for output in (training_errors, listing_errors):
        assert "locked" not in output and "Traceback" not in output, output[-3000:]
    assert counts["errors"] == [] and counts["listings"] > 0 and counts["shows"] > 0

    with Registry.open(home, create=False) as registry:
        (run,) = registry.list_runs()
        detail = registry.get_run(run.id)
    assert run.status == "preempted" and [s.status for s in detail.sessions] == ["preempted"] * SESSIONS
    evaluations = checkpoints = 0
    for session in detail.sessions:
        rows = [(e.frame, e.mean) for e in detail.evaluations if e.session_index == session.index]
        saved = [c for c in detail.checkpoints if c.session_index == session.index]
        newest = json.loads((home / max(saved, key=lambda c: c.frame).path / "meta.json").read_text())
        # Every evaluation the session made (its newest snapshot holds them all) has its row.
        made = [(e["frame"], sum(e["returns"]) / len(e["returns"])) for e in newest["evaluations"]]
        assert [f for f, _ in rows] == [f for f, _ in made] == list(range(EVAL_EVERY, session.frame + 1, EVAL_EVERY))
        assert [m for _, m in rows] == pytest.approx([m for _, m in made])
        # Every snapshot the retention rule kept has its row, and every row its folder.
        folders = sorted(p.name for p in (home / saved[0].path).parent.iterdir() if p.name.startswith("f"))
        assert folders == sorted(Path(c.path).name for c in saved)
        assert session.frame == newest["clock"]["frame"] and [a.end_status for a in detail.attempts
                                                             if a.session_index == session.index] == ["preempted"]
        evaluations += len(rows)
        checkpoints += len(saved)
    with capsys.disabled():
        print(f"\n  8 processes, {SECONDS:.0f} s: {SESSIONS} sessions trained {run.frames_done:,} frames and recorded"
              f" {evaluations} evaluations and {checkpoints} kept snapshots; the listing loop listed"
              f" {counts['listings']} times and showed {counts['shows']} runs; 0 lock errors, 0 rows lost")
