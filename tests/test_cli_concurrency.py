"""Eight processes on one SQLite registry at once: a 6-session training (the launcher and six session
processes, each evaluating, snapshotting and heartbeating several times a second) and a process
listing and showing runs in a loop, for ten seconds of full load (from the moment every session has
recorded an evaluation) and through the training's stop. No lock errors anywhere, and no row lost:
every evaluation and snapshot a session made is in the registry."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zygote
from helpers import cli_env
from same_run import wait_for

from rlrun.registry import Registry
from rlrun.testhooks import HEARTBEAT_ENV

pytestmark = pytest.mark.slow  # real trainings in subprocesses

SESSIONS = 6  # + the launcher + the listing loop = 8 processes
SECONDS = 10.0
"""Of full load: every session training, evaluating every EVAL_EVERY frames, snapshotting every
2 * EVAL_EVERY and heartbeating every HEARTBEAT seconds, the listing loop reading meanwhile. The
cadences are dense so that these seconds make the writes of the half-minute at a 500-frame cadence
this test once ran (several thousand registry writes and reads)."""
EVAL_EVERY = 200
HEARTBEAT = "0.5"  # seconds (3 by default)
CADENCE = [
    "--set",
    f"meta.eval_frequency={EVAL_EVERY}",
    "--set",
    "meta.num_eval_episodes=1",
    "--set",
    f"meta.checkpoint_frequency={2 * EVAL_EVERY}",
    "--set",
    "meta.keep_checkpoints=2",
    "--set",
    "meta.log_frequency=1000",
]

LISTING = """
import json, sys, time
from pathlib import Path
from rlrun.refs import RunFilter
from rlrun.registry import Registry

home, done = Path(sys.argv[1]), Path(sys.argv[2])
counts = {"listings": 0, "shows": 0, "errors": []}
while not done.exists():
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


def _sessions_evaluated(home: Path) -> int:
    """How many sessions have recorded an evaluation (all of them: the load is at its full)."""
    database = home / "registry.sqlite"
    if not database.exists():
        return 0
    try:
        with sqlite3.connect(database, timeout=30) as db:
            (count,) = db.execute("SELECT COUNT(DISTINCT session_id) FROM evaluations").fetchone()
    except sqlite3.OperationalError:  # the schema is still being created
        return 0
    return int(count)


@pytest.mark.slow
def test_eight_processes_at_full_load_lose_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home, done = tmp_path / "runs", tmp_path / "training-ended"
    training = zygote.start(
        ["train", "reinforce_cartpole", "--frames", "100M", "--sessions", str(SESSIONS), *CADENCE],
        {**cli_env(home), HEARTBEAT_ENV: HEARTBEAT},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    listing = subprocess.Popen(
        [sys.executable, "-c", LISTING, str(home), str(done)],
        env=cli_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: _sessions_evaluated(home) == SESSIONS, training, timeout=300)
    time.sleep(SECONDS)
    training.send_signal(signal.SIGTERM)  # a graceful stop: every session saves a snapshot
    _, training_errors = training.communicate(timeout=300)
    done.touch()  # the listing loop read on through the stop
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
        assert session.frame == newest["clock"]["frame"] and [
            a.end_status for a in detail.attempts if a.session_index == session.index
        ] == ["preempted"]
        evaluations += len(rows)
        checkpoints += len(saved)
    with capsys.disabled():
        print(
            f"\n  8 processes, {SECONDS:.0f} s of full load: {SESSIONS} sessions trained {run.frames_done:,} frames"
            f" and recorded {evaluations} evaluations and {checkpoints} kept snapshots; the listing loop listed"
            f" {counts['listings']} times and showed {counts['shows']} runs; 0 lock errors, 0 rows lost"
        )
