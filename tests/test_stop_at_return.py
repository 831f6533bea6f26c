"""`meta.stop_at_return`: a session ends, finished, at the first evaluation whose mean reaches the
target, with its final snapshot there; it stops at that frame whether its evaluations overlap
training or not, and however it was stopped and resumed on the way (bit for bit); a resume of a
run that reached its target has nothing to do, and one given a higher target trains on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import builtin_for, environment
from same_run import BUDGET, CADENCE, assert_same_run, fast, final_state, reference_state, resume_ok, train_here

from rlrun.registry import Registry
from rlrun.testhooks import HEARTBEAT_ENV

pytestmark = pytest.mark.slow  # real trainings, in this process

SPEC = builtin_for("ppo")


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> tuple[float, int]:
    """A return the uninterrupted BUDGET-frame run first reaches at an evaluation after its second
    (test_resume.py's reference, trained once per test run), and that evaluation's frame."""
    straight = reference_state(tmp_path_factory, SPEC, "--frames", str(BUDGET))
    evaluations = [(frame, mean) for frame, mean, *_ in straight["sessions"][0]["recorded"]]
    for i, (frame, mean) in enumerate(evaluations):
        if i >= 2 and mean > max(m for _, m in evaluations[:i]) and frame < BUDGET:
            return mean, frame
    pytest.fail(f"no evaluation after the second beats every one before it: {evaluations}")


def train_to(home: Path, goal: float, *edits: str, **options: Any) -> dict[str, Any]:
    argv = [
        *CADENCE,
        *fast(SPEC),
        "--frames",
        str(BUDGET),
        "--set",
        f"meta.stop_at_return={goal!r}",
        *[arg for edit in edits for arg in ("--set", edit)],
    ]
    return train_here(home, SPEC, argv, **options).json()


def newest(home: Path) -> Any:
    with Registry.open(home, create=False) as registry:
        return max(registry.get_run(registry.resolve("latest").id).checkpoints, key=lambda c: c.frame)


@pytest.mark.parametrize("overlap", [False, True], ids=["inline", "overlapped"])
def test_a_session_ends_finished_at_the_first_evaluation_that_reaches_the_target(
    tmp_path: Path, target: tuple[float, int], overlap: bool
) -> None:
    goal, frame = target
    result = train_to(tmp_path, goal, f"meta.eval_overlap={str(overlap).lower()}")
    [session] = result["sessions"]
    assert (result["status"], session["status"], session["frame"]) == ("finished", "finished", frame)
    assert session["best_eval"] == goal
    last = newest(tmp_path)
    assert (last.frame, last.kind.endswith("final")) == (frame, True)
    again = resume_ok(tmp_path)
    assert "nothing to do" in again.stderr


def test_stopped_and_resumed_it_stops_where_the_uninterrupted_run_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: tuple[float, int]
) -> None:
    goal, frame = target
    straight = train_to(tmp_path / "straight", goal)

    class StopAtFirstEvaluation:
        def on_evaluation(self, info: Any) -> bool:
            return False

    monkeypatch.setenv(HEARTBEAT_ENV, "0.05")
    stopped = train_to(tmp_path / "stopped", goal, callbacks=[StopAtFirstEvaluation()])
    assert stopped["status"] == "preempted" and stopped["sessions"][0]["frame"] < frame
    resume_ok(tmp_path / "stopped")
    with environment(tmp_path / "straight"):
        uninterrupted = final_state(tmp_path / "straight")
    with environment(tmp_path / "stopped"):
        resumed = final_state(tmp_path / "stopped")
    assert straight["sessions"][0]["frame"] == frame
    assert_same_run(uninterrupted, resumed)


def test_a_higher_target_at_resume_trains_on(tmp_path: Path, target: tuple[float, int]) -> None:
    goal, _ = target
    train_to(tmp_path, goal)
    resume_ok(tmp_path, "--set", "meta.stop_at_return=1e9")
    assert newest(tmp_path).frame == BUDGET
