"""`meta.eval_video`: every N-th evaluation's first episode, played again on an env that renders,
into `<session>/videos/eval-<frame>.mp4` and to the trackers. The video is the evaluated episode
(its return is the evaluation's first); a run with videos, stopped and resumed, trains the bits of
a run without them and records the videos an uninterrupted one does; a video that cannot be made is
one line, and training goes on."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import environment, fast
from same_run import CADENCE, assert_same_run, final_state, train_here

from rlrun import paths
from rlrun.session import eval_video, events
from rlrun.spec import load_spec
from rlrun.testhooks import HEARTBEAT_ENV

SPEC = "ppo_cartpole"
FRAMES = 4000  # evaluations at 1k, 2k, 3k, 4k (CADENCE): numbers 0 to 3


def frames_in(video: Path) -> int:
    import imageio

    reader: Any = imageio.get_reader(video)
    try:
        return sum(1 for _ in reader)
    finally:
        reader.close()


def saved_evaluations(home: Path) -> dict[int, dict[str, Any]]:
    [session] = final_state(home)["sessions"]
    return {e["frame"]: e for e in session["saved"].meta.to_json()["evaluations"]}


def videos(home: Path) -> dict[int, Path]:
    [run] = [folder for folder in home.iterdir() if (folder / paths.RUN_MANIFEST).is_file()]
    found = sorted((run / "s0" / "videos").glob("*"))
    return {int(video.stem.removeprefix("eval-")): video for video in found}


@pytest.mark.slow
def test_videos_change_no_bit_and_a_resumed_run_records_the_uninterrupted_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = [*CADENCE, *fast(SPEC), "--frames", str(FRAMES)]
    assert train_here(tmp_path / "plain", SPEC, argv).code == 0

    class StopAtTheSecondEvaluation:
        def on_evaluation(self, info: Any) -> bool:
            return bool(info.frame < 2000)

    monkeypatch.setenv(HEARTBEAT_ENV, "0.05")  # a callback's stop reaches the session at its next heartbeat
    said: list[events.Event] = []
    recorded = [*argv, "--set", "meta.eval_video=3", "--set", "meta.eval_overlap=true"]
    stopped = train_here(
        tmp_path / "videos", SPEC, recorded, callbacks=[StopAtTheSecondEvaluation()], on_event=said.append
    )
    assert stopped.code == 143 and stopped.json()["sessions"][0]["frame"] < 3000
    import rlrun

    with environment(tmp_path / "videos"):
        resumed = rlrun.resume("latest", home=tmp_path / "videos", handle_signals=False, on_event=said.append)
    assert resumed.outcome == "finished"
    assert not [event for event in said if isinstance(event, events.Warned)]

    with environment(tmp_path / "plain"):
        plain = final_state(tmp_path / "plain")
    with environment(tmp_path / "videos"):
        assert_same_run(plain, final_state(tmp_path / "videos"))
        evaluated = saved_evaluations(tmp_path / "videos")
    made = videos(tmp_path / "videos")
    assert sorted(made) == [1000, 4000]  # evaluations 0 and 3, counted on across the resume
    for frame, video in made.items():  # CartPole: an episode's return is its length
        assert frames_in(video) == evaluated[frame]["lengths"][0] == evaluated[frame]["returns"][0]


@pytest.mark.parametrize("overlap", [False, True], ids=["inline", "overlapped"])
def test_the_video_is_the_evaluated_episode(tmp_path: Path, overlap: bool) -> None:
    """Pendulum, whose return is no count of steps; ε-random actions and a cap on the episode, so
    the replay draws what the evaluation drew and is cut where it was."""
    import torch

    from rlrun.algorithms import build_agent
    from rlrun.session.evaluation import Evaluator

    spec = load_spec(
        "sac_pendulum",
        [
            "meta.eval_video=1",
            "meta.eval_epsilon=0.3",
            "meta.eval_max_steps=60",
            "meta.num_eval_episodes=2",
            f"meta.eval_overlap={str(overlap).lower()}",
            "agent.network.hidden=[16, 16]",
        ],
    )
    evaluator = Evaluator(
        spec, *spaces(spec), seed=3, device="cpu", videos=lambda frame: tmp_path / f"eval-{frame}.mp4"
    )
    agent = build_agent(spec, *spaces(spec), seed=3)
    (tmp_path / ".eval-100.tmp-0123abcd.mp4").write_bytes(b"half a video")  # left by a killed attempt
    torch.manual_seed(0)
    try:
        evaluator.submit(500, agent, None, number=0)
        [outcome] = evaluator.finished(wait=True)
    finally:
        evaluator.close()
    video = outcome.video
    assert video is not None and video.problem is None and video.path == tmp_path / "eval-500.mp4"
    assert video.episode_return == outcome.evaluation.returns[0]
    assert frames_in(video.path) == outcome.evaluation.lengths[0] == 60
    assert [p.name for p in tmp_path.iterdir()] == ["eval-500.mp4"]  # no temporary file left, nor a killed one's


def spaces(spec: Any) -> tuple[Any, Any]:
    from rlrun.envs import make_env

    env = make_env(spec.env)
    env.close()
    return env.observation_space, env.action_space


@pytest.mark.parametrize("number,every,recorded", [(0, 3, True), (1, 3, False), (3, 3, True), (4, None, False)])
def test_which_evaluations_get_a_video(number: int, every: int | None, recorded: bool) -> None:
    assert eval_video.due(number, every) is recorded


def test_without_the_video_extra_it_says_so_once_and_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlrun.session.evaluation import play

    monkeypatch.setitem(sys.modules, "imageio", None)  # an import of it fails, as where it is not installed
    spec = load_spec(SPEC, ["meta.eval_video=1"])
    recorder = eval_video.Recorder(spec, lambda frame: tmp_path / f"eval-{frame}.mp4")
    first = recorder.record(
        play,
        100,
        7,
        actor=None,
        normalizer=None,
        wrappers=None,  # type: ignore[arg-type]
        evaluated_return=0.0,
    )
    assert first is not None and first.path is None and first.problem is not None
    assert "meta.eval_video needs imageio" in first.problem and "pip install" in first.problem
    assert "training goes on" in first.problem and "\n" not in first.problem
    assert (
        recorder.record(
            play,
            200,
            7,
            actor=None,
            normalizer=None,
            wrappers=None,  # type: ignore[arg-type]
            evaluated_return=0.0,
        )
        is None
    )
    assert not list(tmp_path.iterdir())


def test_a_video_goes_to_each_tracker_after_the_points_before_it(tmp_path: Path) -> None:
    from rlrun.trackers import Identity
    from rlrun.trackers.delivery import Relay

    class Tracker:
        def __init__(self, name: str) -> None:
            self.name, self.got = name, list[tuple[Any, ...]]()

        def start(self, identity: Identity, rewind: bool) -> str:
            return "run"

        def send(self, points: list[Any]) -> None:
            self.got += [("point", point.frame) for point in points]

        def send_file(self, path: Path, folder: str) -> None:
            self.got.append(("file", path.name, folder))

        def finish(self, status: str, best: float | None) -> None:
            self.got.append(("finished", status))

    made: list[Tracker] = []

    def make(name: str) -> Tracker:
        made.append(Tracker(name))
        return made[-1]

    relay = Relay(
        ["mlflow", "wandb"],
        Identity("r1", 0, 0, {"agent": {"algorithm": "ppo"}, "env": {"id": "x"}}),
        tmp_path,
        rewind=False,
        backlog=[],
        wall_time=0.0,
        make=make,
    )
    relay.add({"frame": 1000, "wall_time": 1.0, "return_mean": 9.0})
    relay.add_evaluation(1000, 10.0, 1.0)
    relay.add_file(1000, tmp_path / "eval-1000.mp4", eval_video.FOLDER)
    relay.add({"frame": 1500, "wall_time": 2.0, "return_mean": 11.0})
    relay.release()
    relay.close("finished", 10.0)
    for tracker in made:
        assert tracker.got == [
            ("point", 1000),
            ("point", 1000),
            ("file", "eval-1000.mp4", "videos"),
            ("point", 1500),
            ("finished", "finished"),
        ]


@pytest.mark.slow
def test_in_a_home_in_object_storage_the_videos_go_to_the_store(tmp_path: Path, s3_bucket: str) -> None:
    from helpers import store_home

    from rlrun import storage

    home = store_home(f"s3://{s3_bucket}/{tmp_path.name}/runs", tmp_path / "runs")
    argv = [*CADENCE, *fast(SPEC), "--frames", "2000", "--set", "meta.eval_video=1"]
    run_id = train_here(home, SPEC, argv).json()["run_id"]
    mirror = storage.mirror_of(home)
    assert mirror is not None
    stored = mirror.keys(mirror.key(paths.session_dir(home, run_id, 0) / "videos"))
    assert [key.rsplit("/", 1)[1] for key in stored] == ["eval-1000.mp4", "eval-2000.mp4"]


@pytest.mark.slow
def test_the_videos_go_to_the_mlflow_run_beside_its_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow's SQLite store, for real (W&B's `send_file` is the artifact that `enjoy --video` sends,
    tests/test_trackers.py; the order of delivery is the fake trackers' test above)."""
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient
    from tracker_readback import mlflow_history

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)  # MLflow's artifacts go to ./mlruns
    argv = [*CADENCE, *fast(SPEC), "--frames", "2000", "--set", "meta.eval_video=2", "--set", 'meta.track=["mlflow"]']
    run = train_here(tmp_path / "runs", SPEC, argv).json()["run_id"]

    history, tracked = mlflow_history(uri, run)
    videos = [a.path for a in MlflowClient(uri).list_artifacts(tracked.info.run_id, "videos")]
    assert videos == ["videos/eval-1000.mp4"]
    assert history and not [key for values in history.values() for key in values if "video" in key]


def test_without_the_video_extra_the_run_is_refused_in_one_line_and_nothing_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing extra is bad input, as `--track` without its tracker's: said before anything is
    written, exit 2 (an env that cannot render is found only once the session runs: a warning then)."""
    from helpers import invoke

    monkeypatch.setitem(sys.modules, "imageio", None)  # an import of it fails, as where it is not installed
    monkeypatch.chdir(tmp_path)
    done = invoke(
        tmp_path / "runs", "train", SPEC, *CADENCE, *fast(SPEC), "--frames", "2000", "--set", "meta.eval_video=1"
    )
    assert done.code == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "meta.eval_video" in done.stderr and "pip install" in done.stderr
    assert not any(tmp_path.rglob("*")), "something was written"
