"""Callbacks (`rlrun.train(spec, callbacks=[...])`): they hear every start, logged step,
evaluation, snapshot and end as the registry records them; they never change training's bits, even
when they draw from the global random generators; returning False stops the run as `rlrun stop`
does, and a hook that raises is reported and stops it too: either way `rlrun resume` continues it
bit for bit into the run that was never stopped."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers import builtin_for, environment
from same_run import BUDGET, CADENCE, assert_same_run, fast, final_state, reference_state, resume_ok, train_here

from rlrun.errors import BadInput
from rlrun.registry import Registry
from rlrun.testhooks import HEARTBEAT_ENV
from rlrun.training.callbacks import EndInfo, EvaluationInfo, LogInfo, SnapshotInfo, StartInfo

pytestmark = pytest.mark.slow  # real trainings, in this process

SPEC = builtin_for("ppo")
ARGS = ("--frames", str(BUDGET))  # test_resume.py's reference: trained once per test run


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return reference_state(tmp_path_factory, SPEC, *ARGS)


def train_with(home: Path, *callbacks: object) -> dict[str, Any]:
    done = train_here(home, SPEC, [*CADENCE, *fast(SPEC), *ARGS], callbacks=list(callbacks))
    return done.json()


class Recorder:
    """Every hook, each drawing from Python's, NumPy's and torch's global generators."""

    def __init__(self) -> None:
        self.heard: list[Any] = []

    def _hear(self, info: Any) -> None:
        random.random(), np.random.rand(), torch.rand(3)
        self.heard.append(info)

    on_start = on_log = on_evaluation = on_snapshot = on_end = _hear

    def of(self, kind: type) -> list[Any]:
        return [info for info in self.heard if isinstance(info, kind)]


def test_callbacks_hear_what_the_registry_records_and_change_no_bit(tmp_path: Path, straight: dict[str, Any]) -> None:
    recorder = Recorder()
    result = train_with(tmp_path, recorder)
    assert result["stopped_by"] is None
    with environment(tmp_path):
        trained = final_state(tmp_path)
    assert_same_run(straight, trained)
    run_id = result["run_id"]
    assert {info.run_id for info in recorder.heard} == {run_id}
    assert recorder.of(StartInfo) == [StartInfo(run_id, 0, trained["run"].seed, 0, BUDGET)]
    evaluations = [(e.frame, e.mean, e.std) for e in recorder.of(EvaluationInfo)]
    assert evaluations == [(frame, mean, std) for frame, mean, std, _, _ in trained["sessions"][0]["recorded"]]
    assert len(evaluations) == BUDGET // 1000
    logged = [info.frame for info in recorder.of(LogInfo)]
    assert logged == sorted(logged) and logged[-1] == BUDGET and len(logged) >= BUDGET // 500
    with Registry.open(tmp_path, create=False) as registry:
        recorded = {(c.frame, c.path) for c in registry.get_run(run_id).checkpoints}
    heard = {(info.frame, info.path) for info in recorder.of(SnapshotInfo)}
    assert recorded <= {(frame, str(Path(path).relative_to(tmp_path))) for frame, path in heard}
    [end] = recorder.of(EndInfo)
    assert (end.status, end.frame, end.error) == ("finished", BUDGET, None)
    assert recorder.heard[-1] is end


class StopAtEvaluation:
    def __init__(self, frame: int) -> None:
        self.frame = frame

    def on_evaluation(self, info: EvaluationInfo) -> bool:
        return info.frame < self.frame


class Raising:
    def on_evaluation(self, info: EvaluationInfo) -> None:
        if info.frame >= 2000:
            raise RuntimeError("the user's bug\nsecond line")


@pytest.mark.parametrize(
    "callback, reason",
    [
        (StopAtEvaluation(2000), "StopAtEvaluation.on_evaluation returned False"),
        (Raising(), "Raising.on_evaluation raised RuntimeError: the user's bug"),
    ],
    ids=["returns False", "raises"],
)
def test_a_callback_stops_the_run_at_that_evaluation_and_resume_is_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, straight: dict[str, Any], callback: object, reason: str
) -> None:
    monkeypatch.setenv(HEARTBEAT_ENV, "3600")  # no heartbeat: the stop cannot wait for one
    result = train_with(tmp_path, callback)
    assert (result["status"], result["stopped_by"]) == ("preempted", reason)
    [session] = result["sessions"]
    assert session["frame"] == 2000  # the evaluation's own frame, not a step later
    with Registry.open(tmp_path, create=False) as registry:
        newest = max(registry.get_run(result["run_id"]).checkpoints, key=lambda c: c.frame)
    assert newest.frame == 2000  # its snapshot there is the one a resume continues from
    resume_ok(tmp_path)
    with environment(tmp_path):
        assert_same_run(straight, final_state(tmp_path))


def test_in_worker_processes_a_false_stops_at_that_evaluation_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sessions, each in a process of its own: each waits for its evaluations to be heard, so
    the one whose evaluation the callback answered stops at its frame, and none goes past it."""
    monkeypatch.setenv(HEARTBEAT_ENV, "3600")
    argv = [*CADENCE, *fast(SPEC), "--frames", "3000", "--set", "meta.sessions=2"]
    result = train_here(tmp_path, SPEC, argv, callbacks=[StopAtEvaluation(1000)]).json()
    assert (result["status"], result["stopped_by"]) == ("preempted", "StopAtEvaluation.on_evaluation returned False")
    frames = [session["frame"] for session in result["sessions"]]
    assert max(frames) == 1000, frames


class Video:
    def __init__(self) -> None:
        self.videos: list[str | None] = []

    def on_evaluation(self, info: EvaluationInfo) -> None:
        self.videos.append(info.video)


def test_the_evaluation_record_names_its_video(tmp_path: Path) -> None:
    pytest.importorskip("imageio", reason="an evaluation video needs the video extra")
    video = Video()
    argv = [*CADENCE, *fast(SPEC), "--frames", "1000", "--set", "meta.eval_video=1"]
    train_here(tmp_path, SPEC, argv, callbacks=[video])
    [path] = video.videos
    assert path is not None and Path(path).is_file() and Path(path).suffix == ".mp4", path


def test_a_callback_without_hooks_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    import rlrun

    with pytest.raises(BadInput, match="has none of on_start, on_log"):
        rlrun.train(rlrun.load_spec(SPEC), home=tmp_path, callbacks=[object()], handle_signals=False)
    with pytest.raises(BadInput, match="on_log is not callable"):
        rlrun.train(
            rlrun.load_spec(SPEC), home=tmp_path, callbacks=[type("C", (), {"on_log": 3})()], handle_signals=False
        )
    assert not list(tmp_path.iterdir())
