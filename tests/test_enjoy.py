"""`rlrun enjoy`: replays and scores a checkpoint, records it as its own kind of evaluation, and
never changes the training records."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers import TINY, builtin_for, fast, invoke, rlrun
from same_run import ALGORITHMS

pytestmark = pytest.mark.slow  # real trainings in subprocesses


def training_records(home: Path) -> dict[str, Any]:
    """What enjoy must never change: training evaluations, checkpoints (rows and files), runs and
    sessions."""
    with sqlite3.connect(home / "registry.sqlite") as db:
        records = {
            "evaluations": db.execute("select * from evaluations where kind = 'train' order by id").fetchall(),
            "checkpoints": db.execute("select * from checkpoints order by id").fetchall(),
            "runs": db.execute("select * from runs").fetchall(),
            "sessions": db.execute("select * from sessions").fetchall(),
        }
    records["files"] = sorted(
        (str(p.relative_to(home)), p.stat().st_mtime, p.stat().st_size) for p in home.glob("*/s*/**/*") if p.is_file()
    )
    return records


def render_fps(home: Path) -> float:
    import gymnasium

    env_id = rlrun(home, "show", "latest", "--json").json()["run"]["env_id"]
    return float(gymnasium.make(env_id).metadata["render_fps"])


@pytest.fixture(scope="module", params=ALGORITHMS)
def trained(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp(f"enjoy-{request.param}") / "runs"
    spec = builtin_for(request.param)
    done = invoke(home, "train", spec, *TINY, *fast(spec))
    assert done.code == 0, done.stderr
    return home


def test_enjoy_scores_the_best_checkpoint_and_changes_no_training_record(trained: Path) -> None:
    before = training_records(trained)
    shown = rlrun(trained, "show", "latest", "--json").json()
    scores = {e["frame"]: e["mean"] for e in shown["evaluations"] if e["kind"] == "train"}
    best_frame = max((c["frame"] for c in shown["checkpoints"] if c["frame"] in scores), key=lambda f: (scores[f], f))
    done = invoke(trained, "enjoy", "--json")
    assert done.code == 0, done.stderr
    result = done.json()
    assert result["checkpoint_frame"] == best_frame and result["score_at_checkpoint"] == scores[best_frame]
    assert len(result["episodes"]) == 5 and result["stochastic"] is False
    assert f"checkpoint at frame {best_frame:,}" in done.stderr and "latest → run" in done.stderr
    assert training_records(trained) == before
    with sqlite3.connect(trained / "registry.sqlite") as db:
        rows = db.execute("select frame, mean, episodes from evaluations where kind = 'enjoy'").fetchall()
    assert (best_frame, result["mean"], 5) in rows


def test_enjoy_is_repeatable_and_takes_checkpoint_and_session_suffixes(trained: Path) -> None:
    first = invoke(trained, "enjoy", "latest/s0@latest", "--episodes", "2", "--seed", "3", "--stochastic", "--json")
    again = invoke(trained, "enjoy", "latest/s0@latest", "--episodes", "2", "--seed", "3", "--stochastic", "--json")
    assert first.code == again.code == 0, first.stderr
    assert first.json()["episodes"] == again.json()["episodes"] and first.json()["checkpoint_frame"] == 3000
    at_frame = invoke(trained, "enjoy", "1@2000", "--episodes", "1", "--json")
    assert at_frame.code == 0 and at_frame.json()["checkpoint_frame"] == 2000
    missing = invoke(trained, "enjoy", "latest@2500")
    assert missing.code == 2 and "no checkpoint at frame 2,500; it has" in missing.stderr


def test_a_tampered_checkpoint_is_refused_and_nothing_runs(trained: Path, tmp_path: Path) -> None:
    shown = rlrun(trained, "show", "latest", "--json").json()
    newest = max(shown["checkpoints"], key=lambda c: c["frame"])
    state = trained / newest["path"] / "state.pt"
    original = state.read_bytes()
    before = training_records(trained)
    try:
        tampered = bytearray(original)
        tampered[len(tampered) // 2] ^= 0xFF
        state.write_bytes(bytes(tampered))
        refused = invoke(trained, "enjoy", "latest@latest", "--video", str(tmp_path / "never.mp4"))
    finally:
        state.write_bytes(original)
    assert refused.code == 2 and "altered" in refused.stderr and "Traceback" not in refused.stderr
    assert refused.stderr.count("error:") == 1
    assert not (tmp_path / "never.mp4").exists()
    after = training_records(trained)
    assert after["evaluations"] == before["evaluations"] and after["checkpoints"] == before["checkpoints"]


@pytest.mark.parametrize("suffix", [".mp4", ".gif"])
def test_video_has_one_frame_per_environment_step(trained: Path, tmp_path: Path, suffix: str) -> None:
    imageio = pytest.importorskip("imageio", reason="the video extra is not installed (pip install 'rlrun[video]')")
    image = pytest.importorskip("PIL.Image", reason="the video extra is not installed (pip install 'rlrun[video]')")
    path = tmp_path / f"enjoy{suffix}"
    done = invoke(trained, "enjoy", "--episodes", "2", "--video", str(path), "--json")
    assert done.code == 0, done.stderr
    steps = sum(e["length"] for e in done.json()["episodes"])
    assert done.json()["video_frames"] == steps
    if suffix == ".mp4":
        reader = imageio.get_reader(path)
        assert reader.count_frames() == steps
        assert reader.get_meta_data()["fps"] > 0
    else:
        # A GIF stores identical consecutive frames once with their durations added, so count time.
        with image.open(path) as gif:
            durations = []
            for index in range(gif.n_frames):
                gif.seek(index)
                durations.append(gif.info["duration"])
        assert 1 <= len(durations) <= steps
        assert sum(durations) == pytest.approx(steps * 1000 / render_fps(trained), abs=10 * len(durations))


def test_render_without_a_display_explains_and_suggests_a_video(trained: Path) -> None:
    done = rlrun(trained, "enjoy", "--render")
    assert done.code == 2 and "needs a display" in done.stderr and "--video" in done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    both = rlrun(trained, "enjoy", "--render", "--video", "x.mp4")
    assert both.code == 2 and "not both" in both.stderr
    wrong = invoke(trained, "enjoy", "--video", "x.avi")
    assert wrong.code == 2 and ".gif or an .mp4" in wrong.stderr
