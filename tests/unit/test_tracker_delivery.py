"""The trackers' own logic, without a tracker: the spec as parameters, a session's points (the same
live and re-sent), and background delivery (retries, a bounded queue, a bounded wait at close). The
tracker here is a stand-in that records what it is given and fails when told to: the thing under
test is the delivery around it (the real trackers: tests/test_trackers.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from rlrun.trackers import Identity, Point, flatten, history, status
from rlrun.trackers import delivery as delivery_module
from rlrun.trackers.delivery import Relay

SPEC = {
    "name": "x",
    "agent": {"algorithm": "ppo", "optimizer": {"lr": 0.001}, "net": {"hidden": [64, 64]}},
    "env": {"id": "CartPole-v1", "kwargs": {}},
    "meta": {"max_frame": 1000},
}
IDENTITY = Identity("abc", 0, 7, SPEC)


class Recording:
    """A tracker that keeps what it gets; `down` makes every call fail, `slow` makes sends block."""

    name = "recording"

    def __init__(self) -> None:
        self.points: list[Point] = []
        self.started: list[bool] = []
        self.finished: tuple[str, float | None] | None = None
        self.down = False
        self.gate = threading.Event()
        self.gate.set()

    def start(self, identity: Identity, rewind: bool) -> str:
        self._fail_if_down()
        self.started.append(rewind)
        if rewind:
            self.points.clear()
        return "tracked-1"

    def send(self, points: Sequence[Point]) -> None:
        self.gate.wait()
        self._fail_if_down()
        self.points.extend(points)

    def finish(self, status: str, best: float | None) -> None:
        self._fail_if_down()
        self.finished = (status, best)

    def _fail_if_down(self) -> None:
        if self.down:
            raise ConnectionError("tracker down\nsecond line")


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery_module, "RETRY_FIRST", 0.01)
    monkeypatch.setenv(delivery_module.CLOSE_SECONDS_ENV, "2")


def relay(tmp_path: Path, tracker: Recording, *, rewind: bool = False, backlog: Sequence[Point] = ()) -> Relay:
    return Relay(
        ["recording"], IDENTITY, tmp_path, rewind=rewind, backlog=backlog, wall_time=0.0, make=lambda name: tracker
    )


def row(frame: int, loss: float | None = 0.5) -> dict[str, float | int | None]:
    return {
        "frame": frame,
        "episode": frame // 10,
        "opt_step": frame // 100,
        "wall_time": frame / 1000,
        "fps": 1000.0,
        "return_mean": 20.0,
        "length_mean": None,
        "loss": loss,
    }


def test_the_spec_flattens_to_dotted_keys_lists_and_empty_objects_stay_values() -> None:
    flat = flatten(SPEC)
    assert flat["agent.optimizer.lr"] == 0.001 and flat["agent.net.hidden"] == [64, 64]
    assert flat["env.kwargs"] == {} and flat["meta.max_frame"] == 1000 and "agent" not in flat


def test_a_history_is_the_points_a_live_session_sent_in_order() -> None:
    rows = [row(500), row(1000, loss=None)]
    points = history(rows, [{"frame": 1000, "mean": 9.0, "std": 1.0}, {"frame": 700, "mean": 5.0, "std": 0.0}])
    assert [p.frame for p in points] == [500, 700, 1000, 1000]
    assert points[0].values == {"time/fps": 1000.0, "rollout/return_mean": 20.0, "train/loss": 0.5}
    assert "train/loss" not in points[2].values and points[3].values == {
        "eval/return_mean": 9.0,
        "eval/return_std": 1.0,
    }
    assert points[1].wall_time == 0.5 and points[3].wall_time == 1.0  # an evaluation: its latest row's time

    tracker = Recording()
    live = relay(Path("/nonexistent"), tracker)
    live.add(rows[0])
    live.add_evaluation(700, 5.0, 0.0)
    live.add(rows[1])
    live.add_evaluation(1000, 9.0, 1.0)
    time.sleep(0.05)
    assert tracker.points == []  # not before the metrics log has them
    live.release()
    deadline = time.monotonic() + 5
    while len(tracker.points) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert tracker.points == points


def test_points_wait_out_an_outage_and_arrive_in_order(tmp_path: Path) -> None:
    tracker = Recording()
    tracker.down = True
    session = relay(tmp_path, tracker, rewind=True, backlog=history([row(500)], []))
    for frame in (1000, 1500):
        session.add(row(frame))  # never blocks, the tracker being down
        session.release()
    time.sleep(0.05)
    tracker.down = False
    (report,) = session.close("finished", 3.5)
    assert report == status.Delivered("recording", "tracked-1", 0, None, last_frame=1500)
    assert [p.frame for p in tracker.points] == [500, 1000, 1500] and tracker.started == [True]
    assert tracker.finished == ("finished", 3.5)
    assert status.read(tmp_path) == {"recording": report}


def test_a_tracker_still_down_at_close_is_given_up_on_and_what_it_missed_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(delivery_module.CLOSE_SECONDS_ENV, "0.3")
    tracker = Recording()
    tracker.down = True
    session = relay(tmp_path, tracker, backlog=history([row(500)], []))
    session.add(row(1000))
    started = time.monotonic()
    (report,) = session.close("failed", None)
    assert time.monotonic() - started < 2
    assert report.run is None and report.undelivered == 2 and report.last_frame is None
    assert report.error == "ConnectionError: tracker down"
    assert status.read(tmp_path)["recording"].undelivered == 2


def test_a_full_queue_drops_points_and_counts_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delivery_module, "CAPACITY", 3)
    monkeypatch.setenv(delivery_module.CLOSE_SECONDS_ENV, "0.5")
    tracker = Recording()
    tracker.gate.clear()  # a tracker that hangs: sends block
    session = relay(tmp_path, tracker)
    for frame in range(500, 5001, 500):
        session.add(row(frame))
        session.release()
    (report,) = session.close("finished", None)
    assert report.undelivered == 10 and tracker.points == []
    tracker.gate.set()


def test_status_of_a_session_without_trackers_is_empty(tmp_path: Path) -> None:
    assert status.read(tmp_path) == {}
    (tmp_path / status.FILE_NAME).write_text("{not json")
    assert status.read(tmp_path) == {}


def test_an_attempt_that_lost_its_lease_sends_nothing_more(tmp_path: Path) -> None:
    tracker = Recording()
    session = relay(tmp_path, tracker)
    session.add(row(500))
    session.release()
    deadline = time.monotonic() + 5
    while not tracker.points and time.monotonic() < deadline:
        time.sleep(0.01)
    session.add(row(1000))  # in the log's pending rows when the lease went
    session.abandon()
    session.release()
    time.sleep(0.1)
    assert [p.frame for p in tracker.points] == [500] and tracker.finished is None
    assert not (tmp_path / status.FILE_NAME).exists()
