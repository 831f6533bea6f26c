"""Experiment trackers against the real ones: MLflow's SQLite store (in-process, no server) and W&B
offline (its run files read back). A session's tracker history after kill -9 and resume is the
uninterrupted run's, point for point; a tracker that is down never stops training, `rlrun show` says
what it missed and `rlrun track` sends it afterwards; a search's trials share a parent; an `enjoy`
video goes to the session's tracker runs as an artifact, their history untouched. (Without the
package, --track is bad input: tests/test_bad_input.py.)"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest
import zygote
from helpers import cli_env, fast, rlrun, run_cli, search_spec
from same_run import (
    CADENCE,
    assert_same_run,
    final_state,
    newest_checkpoint_frame,
    resume_ok,
    train,
    wait_for,
)
from tracker_readback import History, mlflow_history, training_history, wandb_history, wandb_records

from rlrun.registry import Registry
from rlrun.testhooks import HEARTBEAT_ENV, HOLD_ENV

pytestmark = [
    pytest.mark.slow,
    # Found, not imported: every pytest-xdist worker collects this file, and importing MLflow and W&B
    # costs each ~3 CPU seconds before its first test; only the worker that runs these imports them.
    pytest.mark.skipif(
        not all(importlib.util.find_spec(name) for name in ("mlflow", "wandb")), reason="needs mlflow and wandb"
    ),
]

SPEC = "reinforce_cartpole"
TRACK = ["--track", "mlflow", "--track", "wandb"]
FRAMES = 12_000
SPARSE = ["--set", "meta.checkpoint_frequency=4000", "--set", "meta.eval_frequency=4000", "--frames", str(FRAMES)]
"""Seven log rows between snapshots (an evaluation only where there is a snapshot, so none for a
new best between them): a run held between two snapshots has trackers past the newest one, W&B's
file too (it writes a step once the next one comes). Three snapshot intervals: the run is held in
the second (at 6,000) and killed there, and its resume makes a snapshot of its own (8,000) before
the end."""


@pytest.fixture
def trackers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Where the trackers write, through their own environment variables (inherited by `rlrun`)."""
    where = {
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(tmp_path / "wandb"),
        "WANDB_PROJECT": "rlrun-tests",
        "WANDB_SILENT": "true",
    }
    (tmp_path / "wandb").mkdir()
    for name, value in where.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)  # MLflow's artifacts (the spec) go to ./mlruns
    from mlflow import MlflowClient

    MlflowClient(where["MLFLOW_TRACKING_URI"]).search_experiments()  # its tables made now, not mid-run
    return where


def histories(run_id: str, where: dict[str, str]) -> tuple[History, History]:
    mlflow, _ = mlflow_history(where["MLFLOW_TRACKING_URI"], run_id)
    return mlflow, wandb_history(Path(where["WANDB_DIR"]), f"{run_id}-s0")


def run_id(home: Path) -> str:
    with Registry.open(home, create=False) as registry:
        return registry.resolve("latest").id


def mlflow_newest_step(where: dict[str, str], besides: str) -> int:
    """The newest step MLflow holds of a run other than `besides`."""
    database = Path(where["MLFLOW_TRACKING_URI"].removeprefix("sqlite:///"))
    try:
        with sqlite3.connect(database) as db:
            (step,) = db.execute(
                "select coalesce(max(m.step), -1) from metrics m join tags t on"
                " t.run_uuid = m.run_uuid and t.key = 'rlrun.run' and t.value <> ?",
                (besides,),
            ).fetchone()
    except sqlite3.OperationalError:  # its tables are still being made
        return -1
    return int(step)


def wandb_newest_step(where: dict[str, str], besides: str) -> int:
    """The newest step W&B's offline files hold of a run other than `besides`."""
    runs = {folder.name.split("-")[-2] for folder in Path(where["WANDB_DIR"], "wandb").glob("offline-run-*-s0")}
    return max(
        (max(wandb_history(Path(where["WANDB_DIR"]), f"{run}-s0") or [-1]) for run in runs - {besides}), default=-1
    )


def test_tracker_history_after_kill_and_resume_is_the_uninterrupted_runs(
    tmp_path: Path, trackers: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HEARTBEAT_ENV, "0.2")  # rows reach the log, and the trackers, between snapshots too
    straight_home, killed_home = tmp_path / "straight", tmp_path / "killed"
    done = train(straight_home, SPEC, *TRACK, *SPARSE)
    assert done.code == 0, done.stderr
    straight_id = run_id(straight_home)

    # kill -9 once a snapshot is in and the trackers hold points past it (what the resume must forget):
    # the run is held at frame 6,000 (its trackers given every row up to there, the snapshot at
    # 4,000 in), so it cannot end however long their delivery, or W&B's writing, takes
    held = tmp_path / "held.json"
    process = zygote.start(
        ["train", SPEC, *CADENCE, *fast(SPEC), *TRACK, *SPARSE],
        env={**cli_env(killed_home), HOLD_ENV: f"6000@{held}"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_for(held.exists, process)
    delivered = json.loads(held.read_text())
    assert delivered.keys() == {"mlflow", "wandb"} and min(delivered.values()) >= 6000, delivered

    def past_the_snapshot() -> bool:  # what the trackers' own stores hold (W&B's offline file lags the session)
        stored = min(mlflow_newest_step(trackers, straight_id), wandb_newest_step(trackers, straight_id))
        return 2000 <= newest_checkpoint_frame(killed_home) < stored

    wait_for(past_the_snapshot, process)
    os.killpg(process.pid, signal.SIGKILL)
    assert process.wait(timeout=30) == -signal.SIGKILL
    killed_id = run_id(killed_home)
    snapshot_frame = newest_checkpoint_frame(killed_home)
    for name, before in zip(("mlflow", "wandb"), histories(killed_id, trackers), strict=True):
        assert max(before) > snapshot_frame, f"{name} held nothing past the snapshot: the test would prove nothing"

    resume_ok(killed_home, "latest")  # no --track: the run remembers its trackers
    assert_same_run(final_state(straight_home), final_state(killed_home))
    straight, resumed = histories(straight_id, trackers), histories(killed_id, trackers)
    for name, a, b in zip(("mlflow", "wandb"), straight, resumed, strict=True):
        assert max(a) == FRAMES and any("eval/return_mean" in values for values in a.values()), name
        assert training_history(a) == training_history(b), f"{name} history differs from the uninterrupted run's"
        assert a.keys() == b.keys() and all("time/fps" in b[step] for step in b if "rollout/return_mean" in b[step])

    _, run = mlflow_history(trackers["MLFLOW_TRACKING_URI"], killed_id)
    assert run.info.status == "FINISHED" and run.data.tags["mlflow.runName"] == f"{killed_id}/s0"
    assert run.data.tags["rlrun.algorithm"] == "reinforce" and run.data.params["meta.max_frame"] == str(FRAMES)
    assert run.data.tags["eval/best_return_mean"]

    # `show --json` says what each tracker got of the resumed session: everything, up to the last frame
    shown = rlrun(killed_home, "show", "latest", "--json")
    assert shown.code == 0, shown.stderr
    reports = {report["tracker"]: report for report in shown.json()["trackers"]}
    assert reports.keys() == {"mlflow", "wandb"}
    assert reports["mlflow"] == {
        "session": 0,
        "tracker": "mlflow",
        "run": run.info.run_id,
        "last_frame": FRAMES,
        "undelivered": 0,
        "error": None,
    }
    assert reports["wandb"]["run"] == f"{killed_id}-s0" and reports["wandb"]["last_frame"] == FRAMES


@pytest.mark.any_home
def test_a_tracker_outage_never_stops_training_and_track_sends_the_history_afterwards(
    home: Path, trackers: dict[str, str]
) -> None:
    """In a home in object storage the session's trackers.json reaches the store (under its lease),
    and `show` and `track`, each in a working copy of its own, read it from there."""
    with socket_closed() as port:
        down = {
            "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{port}",
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
            "MLFLOW_HTTP_REQUEST_TIMEOUT": "1",
            "RLRUN_TRACKER_CLOSE_SECONDS": "2",
        }
        done = train(home, SPEC, "--track", "mlflow", "--frames", "3000", env=down)
    assert done.code == 0, done.stderr
    shown = rlrun(home, "show", "latest")
    assert shown.code == 0 and "not delivered to mlflow" in shown.stderr and "rlrun track" in shown.stderr
    (missed,) = rlrun(home, "show", "latest", "--json").json()["trackers"]  # the same facts, for scripts
    assert missed["session"] == 0 and missed["tracker"] == "mlflow" and missed["run"] is None
    assert missed["undelivered"] > 0 and missed["error"] and missed["last_frame"] is None
    assert f"{missed['undelivered']} point(s) not delivered to mlflow: {missed['error']}" in shown.stderr

    sent = rlrun(home, "track", "latest", "--to", "mlflow", "--json")
    assert sent.code == 0, sent.stderr
    assert "not delivered" not in rlrun(home, "show", "latest").stderr
    (delivered,) = rlrun(home, "show", "latest", "--json").json()["trackers"]
    assert delivered == {**missed, "run": delivered["run"], "undelivered": 0, "error": None, "last_frame": 3000}
    assert [delivered] == sent.json() and delivered["run"]
    history, _ = mlflow_history(trackers["MLFLOW_TRACKING_URI"], run_id(home))
    assert sorted(step for step, values in history.items() if "rollout/return_mean" in values) == list(
        range(500, 3001, 500)
    )
    assert [step for step, values in sorted(history.items()) if "eval/return_mean" in values] == [1000, 2000, 3000]

    again = rlrun(home, "track", "latest", "--to", "mlflow")  # sent twice: the tracker run holds it once
    assert again.code == 0, again.stderr
    assert mlflow_history(trackers["MLFLOW_TRACKING_URI"], run_id(home))[0] == history


class socket_closed:
    """A loopback port nothing listens on (bound, then closed)."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            return int(probe.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        return None


def test_a_searchs_trials_are_nested_under_one_parent_and_grouped(tmp_path: Path, trackers: dict[str, str]) -> None:
    home = tmp_path / "home"
    done = rlrun(home, "search", str(search_spec(tmp_path)), "--trials", "2", "--parallel", "2", *TRACK)
    assert done.code == 0, done.stderr
    with Registry.open(home, create=False) as registry:
        (search, *_), *_ = registry.list_searches()
        runs = [t.run_id for t in registry.get_search(search.id).trials]
    assert len(runs) == 2 and all(runs)

    from mlflow import MlflowClient

    client = MlflowClient(trackers["MLFLOW_TRACKING_URI"])
    experiments = [e.experiment_id for e in client.search_experiments()]
    (parent,) = client.search_runs(experiments, filter_string="tags.`rlrun.parent` = 'search'")
    assert parent.data.tags["rlrun.search"] == search.id
    for run in runs:
        history, trial = mlflow_history(trackers["MLFLOW_TRACKING_URI"], run)
        assert trial.data.tags["mlflow.parentRunId"] == parent.info.run_id and history
        (file,) = Path(trackers["WANDB_DIR"]).glob(f"wandb/offline-run-*-{run}-s0/run-{run}-s0.wandb")
        (record,) = [r.run for r in wandb_records(file) if r.WhichOneof("record_type") == "run"]
        assert record.run_group == search.id and wandb_history(Path(trackers["WANDB_DIR"]), f"{run}-s0")


def test_an_enjoy_video_goes_to_the_sessions_tracker_runs_and_leaves_their_history_alone(
    tmp_path: Path, trackers: dict[str, str]
) -> None:
    pytest.importorskip("imageio_ffmpeg")
    home = tmp_path / "home"
    done = train(home, SPEC, *TRACK, "--frames", "3000")
    assert done.code == 0, done.stderr
    run = run_id(home)
    before = histories(run, trackers)
    assert all(before), "the trackers hold no history: the test would prove nothing"

    video = tmp_path / "enjoy.mp4"
    shown = rlrun(home, "enjoy", "latest", "--episodes", "1", "--video", str(video))
    assert shown.code == 0 and video.stat().st_size > 0, shown.stderr
    assert "not sent" not in shown.stderr, shown.stderr
    assert histories(run, trackers) == before  # an artifact has no step: no point added, none changed

    from mlflow import MlflowClient

    _, tracked = mlflow_history(trackers["MLFLOW_TRACKING_URI"], run)
    (artifact,) = MlflowClient(trackers["MLFLOW_TRACKING_URI"]).list_artifacts(tracked.info.run_id, "enjoy")
    assert artifact.path == "enjoy/enjoy.mp4" and artifact.file_size == video.stat().st_size
    records = [
        r
        for file in Path(trackers["WANDB_DIR"]).glob(f"wandb/offline-run-*-{run}-s0/run-{run}-s0.wandb")
        for r in wandb_records(file)
        if r.WhichOneof("record_type") == "artifact"
    ]
    videos = [r.artifact for r in records if r.artifact.type == "video"]
    assert [[entry.path for entry in a.manifest.contents] for a in videos] == [["enjoy.mp4"]]

    # a tracker that is down: enjoy still plays and records, and says in one line what was not sent
    with socket_closed() as port:
        down = {
            "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{port}",
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
            "MLFLOW_HTTP_REQUEST_TIMEOUT": "1",
        }
        again = run_cli(home, "enjoy", "latest", "--episodes", "1", "--video", str(video), env=down)
    assert again.code == 0, again.stderr
    assert "enjoy.mp4 not sent to mlflow" in again.stderr and "Traceback" not in again.stderr
    assert "not sent to wandb" not in again.stderr


def test_a_tracker_that_cannot_be_reached_is_one_warning_line_and_its_reason_recorded(tmp_path: Path) -> None:
    """MLflow at a port nobody listens on: training goes on to its end (exit 0), the command says
    so once, in one line, and `show --json` records why the points were not delivered (MLflow's own
    retries, minutes long by default, are bounded so the reason is known before the session closes)."""
    home = tmp_path / "runs"
    unreachable = {"MLFLOW_TRACKING_URI": "http://127.0.0.1:1", "RLRUN_TRACKER_CLOSE_SECONDS": "5"}
    done = run_cli(home, "train", SPEC, *CADENCE, *fast(SPEC), "--frames", "3000", "--track", "mlflow", env=unreachable)
    assert done.code == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "warning:" in line]
    assert len(warnings) == 1 and warnings[0].startswith("s0 warning: tracker mlflow cannot be reached ("), warnings
    assert "127.0.0.1" in warnings[0] and "`rlrun track` sends it later" in warnings[0]
    shown = rlrun(home, "show", "latest", "--json").json()
    assert shown["run"]["status"] == "finished"
    (report,) = shown["trackers"]
    assert report["tracker"] == "mlflow" and report["undelivered"] > 0 and "127.0.0.1" in report["error"], report
