"""The supervisor of worker processes, with fake workers: tiny functions of this module run in real
spawned processes (spawn imports this module there by name), that speak, sleep, stop or not, and
die. No training, no torch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Any

import pytest

from rlrun.session.stopping import StopRequest
from rlrun.training.supervisor import Supervisor, Work
from rlrun.training.zygote import START_METHOD

PRUNE = -1


# -- fake workers: target(*args, outbox, shared_stop) --------------------------------------------


def chatty(count: int, outbox: Any, shared_stop: Any) -> None:
    outbox.put(("started", os.getpid()))
    for i in range(count):
        outbox.put(("said", i))
    outbox.put(("ended", "done"))


def sleeper(seconds: float, outbox: Any, shared_stop: Any) -> None:
    outbox.put(("started", os.getpid()))
    time.sleep(seconds)
    outbox.put(("ended", "done"))


def until_stopped(most_seconds: float, outbox: Any, shared_stop: Any) -> None:
    """Works until asked to stop, then says with which request it was asked."""
    stop = StopRequest(shared_stop)
    outbox.put(("started", os.getpid()))
    deadline = time.monotonic() + most_seconds
    while not stop.signal and time.monotonic() < deadline:
        time.sleep(0.01)
    outbox.put(("ended", stop.signal))


def until_signalled(outbox: Any, shared_stop: Any) -> None:
    """Says each stop request it sees; ends at a signal's (a positive one), not at another's."""
    stop = StopRequest(shared_stop)
    outbox.put(("started", os.getpid()))
    seen = 0
    deadline = time.monotonic() + 20
    while stop.signal <= 0 and time.monotonic() < deadline:
        if stop.signal != seen:
            seen = stop.signal
            outbox.put(("saw", seen))
        time.sleep(0.01)
    outbox.put(("ended", stop.signal))


def takes_signals(most_seconds: float, outbox: Any, shared_stop: Any) -> None:
    """`until_stopped`, with the handler a session process installs: a signal to it requests its stop."""
    from rlrun.session.stopping import stop_on_signals

    with stop_on_signals(StopRequest(shared_stop)):
        until_stopped(most_seconds, outbox, shared_stop)


def deaf(outbox: Any, shared_stop: Any) -> None:
    """Notices a stop, says so, and carries on regardless; SIGTERM too is ignored."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stop = StopRequest(shared_stop)
    outbox.put(("started", os.getpid()))
    while not stop.signal:
        time.sleep(0.01)
    outbox.put(("ignoring", stop.signal))
    while True:
        time.sleep(1)


def dies_after_a_word(code: int, outbox: Any, shared_stop: Any) -> None:
    outbox.put(("started", os.getpid()))
    time.sleep(0.3)  # a moment alive after its word, then out without a flush
    os._exit(code)


def raises(outbox: Any, shared_stop: Any) -> None:
    raise RuntimeError("a bug in the worker")


def reports_then_exits_1(outbox: Any, shared_stop: Any) -> None:
    outbox.put(("ended", "failed"))
    raise SystemExit(1)


def waits_forever(outbox: Any, shared_stop: Any) -> None:
    outbox.put(("started", os.getpid()))
    while True:
        time.sleep(1)


# -- helpers ----------------------------------------------------------------------------------------


class Watch:
    """The callbacks: records every message, the silent deaths, and the workers' pids."""

    def __init__(self) -> None:
        self.messages: list[tuple[int, Any]] = []
        self.deaths: list[tuple[int, int | None]] = []
        self.pids: dict[int, int] = {}

    def on_message(self, key: int, message: Any) -> bool:
        self.messages.append((key, message))
        if message[0] == "started":
            self.pids[key] = message[1]
        return bool(message[0] == "ended")

    def on_silent_death(self, key: int, exitcode: int | None) -> None:
        self.deaths.append((key, exitcode))
        self.messages.append((key, ("silent death", exitcode)))

    def of(self, key: int) -> list[Any]:
        return [m for k, m in self.messages if k == key]


def supervise(watch: Watch, work: list[Work] | Iterator[Work], at_most: int = 8, **options: Any) -> int:
    supervisor = Supervisor(watch.on_message, watch.on_silent_death, at_most=at_most, handle_signals=False, **options)
    return supervisor.run(work)


def running(pid: int) -> bool:
    """Alive and not a zombie waiting to be reaped."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def assert_nothing_left(watch: Watch) -> None:
    import multiprocessing

    assert not any(running(pid) for pid in watch.pids.values())
    assert multiprocessing.active_children() == []


@pytest.fixture(autouse=True)
def spawned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers spawned, not forked from a zygote: these fake workers import nothing heavy, and each
    run's zygote would import torch, gymnasium and the training modules first (18 of this file's 25
    seconds). Forking from the zygote is tests/test_zygote.py's, and every training's."""
    monkeypatch.setenv(START_METHOD, "spawn")


@pytest.fixture(autouse=True)
def tracker_as_found() -> Iterator[None]:
    """multiprocessing's resource tracker as each test found it: stopped after a run that started
    it, left running where the caller's was (an earlier test in this process may have started it)."""
    before = resource_tracker._resource_tracker._pid
    yield
    if before is None:
        assert resource_tracker._resource_tracker._pid is None, "the resource tracker outlived the supervisor"
    else:
        assert resource_tracker._resource_tracker._pid == before, "the caller's resource tracker was stopped"


# -- tests ------------------------------------------------------------------------------------------


def test_each_workers_messages_arrive_in_order_and_its_last_word_ends_it() -> None:
    watch = Watch()
    assert supervise(watch, [Work(key, chatty, (40,)) for key in range(3)]) == 0
    for key in range(3):
        assert watch.of(key) == [("started", watch.pids[key]), *[("said", i) for i in range(40)], ("ended", "done")]
    assert watch.deaths == []
    assert_nothing_left(watch)


def test_at_most_k_run_at_once_and_work_is_pulled_only_when_a_place_is_free() -> None:
    watch = Watch()
    log: list[str] = []
    most_alive = 0

    def on_message(key: int, message: Any) -> bool:
        nonlocal most_alive
        if message[0] == "started":
            log.append("started")
            most_alive = max(most_alive, sum(running(pid) for pid in [*watch.pids.values(), message[1]]))
        ended = watch.on_message(key, message)
        if ended:
            log.append("ended")
        return ended

    def pending() -> Iterator[Work]:
        for key in range(4):
            log.append("pulled")
            yield Work(key, sleeper, (1.0,))

    Supervisor(on_message, watch.on_silent_death, at_most=2, handle_signals=False).run(pending())
    assert most_alive == 2
    assert log.count("started") == 4 and watch.deaths == []
    for at in (i for i, entry in enumerate(log) if entry == "pulled"):
        assert log[:at].count("pulled") - log[:at].count("ended") < 2, log


def test_a_stop_reaches_every_worker_and_is_the_groups_result() -> None:
    watch = Watch()
    supervisor: Supervisor

    def on_message(key: int, message: Any) -> bool:
        ended = watch.on_message(key, message)
        if len(watch.pids) == 3:
            supervisor.stop.request(signal.SIGTERM)
        return ended

    supervisor = Supervisor(on_message, watch.on_silent_death, at_most=3, handle_signals=False)
    started = time.monotonic()
    assert supervisor.run([Work(key, until_stopped, (60.0,)) for key in range(3)]) == signal.SIGTERM
    assert time.monotonic() - started < 30
    assert [watch.of(key)[-1] for key in range(3)] == [("ended", signal.SIGTERM)] * 3
    assert_nothing_left(watch)


def test_work_started_after_a_stop_is_asked_to_stop_at_once() -> None:
    """A local run's sessions all start, even after a signal held during start-up: each records its stop."""
    watch = Watch()
    stop = StopRequest()
    stop.request(signal.SIGINT)
    assert supervise(watch, [Work(key, until_stopped, (60.0,)) for key in range(2)], stop=stop) == signal.SIGINT
    assert [watch.of(key)[-1] for key in range(2)] == [("ended", signal.SIGINT)] * 2


def test_a_stop_of_one_worker_stops_only_it_and_a_signal_overrides_it() -> None:
    watch = Watch()
    prune_one = StopRequest()
    supervisor: Supervisor

    def on_message(key: int, message: Any) -> bool:
        ended = watch.on_message(key, message)
        if len(watch.pids) == 3 and not prune_one.signal:
            prune_one.request(PRUNE)
        if message == ("saw", PRUNE):
            supervisor.stop.request(signal.SIGTERM)
        return ended

    supervisor = Supervisor(on_message, watch.on_silent_death, at_most=3, handle_signals=False)
    work = [Work(0, until_signalled), Work(1, until_signalled, (), prune_one), Work(2, until_signalled)]
    assert supervisor.run(work) == signal.SIGTERM
    assert watch.of(0) == [("started", watch.pids[0]), ("ended", signal.SIGTERM)]
    assert watch.of(1) == [("started", watch.pids[1]), ("saw", PRUNE), ("ended", signal.SIGTERM)]
    assert watch.of(2) == [("started", watch.pids[2]), ("ended", signal.SIGTERM)]


def test_a_signal_one_worker_took_stops_them_all() -> None:
    """As when a run's sessions shared one stop value: `kill -TERM` of one session stops the run."""
    watch = Watch()

    def on_message(key: int, message: Any) -> bool:
        if key == 0 and message[0] == "started":
            os.kill(message[1], signal.SIGTERM)
        return watch.on_message(key, message)

    supervisor = Supervisor(on_message, watch.on_silent_death, at_most=2, handle_signals=False)
    assert supervisor.run([Work(0, takes_signals, (20.0,)), Work(1, until_stopped, (20.0,))]) == signal.SIGTERM
    assert [watch.of(key)[-1] for key in range(2)] == [("ended", signal.SIGTERM)] * 2


def test_a_worker_that_dies_without_its_last_word_is_reported_after_its_other_words() -> None:
    watch = Watch()

    def on_message(key: int, message: Any) -> bool:
        if key == 3 and message[0] == "started":
            # At once, while its pipe may still be busy: each worker's pipe is its own, so the
            # others' words still come (a shared queue's write lock once stayed taken here).
            os.kill(message[1], signal.SIGKILL)
        return watch.on_message(key, message)

    supervisor = Supervisor(on_message, watch.on_silent_death, at_most=4, handle_signals=False)
    work = [Work(0, dies_after_a_word, (7,)), Work(1, raises), Work(2, reports_then_exits_1), Work(3, waits_forever)]
    assert supervisor.run(work) == 0
    assert sorted(watch.deaths) == [(0, 7), (1, 1), (3, -signal.SIGKILL)]
    assert watch.of(0) == [("started", watch.pids[0]), ("silent death", 7)]
    assert watch.of(2) == [("ended", "failed")]  # it said how it ended: its exit code is its own business
    assert_nothing_left(watch)


def test_a_worker_that_exited_with_words_still_in_the_pipe_is_heard_not_judged_dead() -> None:
    """The supervisor is slow on the first message; by then the worker has sent everything and exited."""
    watch = Watch()

    def slow_on_message(key: int, message: Any) -> bool:
        if message[0] == "started":
            while running(message[1]):
                time.sleep(0.05)
        return watch.on_message(key, message)

    supervisor = Supervisor(slow_on_message, watch.on_silent_death, at_most=1, handle_signals=False)
    assert supervisor.run([Work(0, chatty, (300,))]) == 0
    assert watch.deaths == []
    assert watch.of(0)[-1] == ("ended", "done") and len(watch.of(0)) == 302


SCRIPT = """
import os, sys
sys.path.insert(0, {here!r})
import test_supervisor as fakes
from rlrun.training.supervisor import Supervisor, Work

def on_message(key, message):
    print(*message, flush=True)
    return message[0] == "ended"

signal = Supervisor(on_message, lambda key, code: None, at_most=2).run(
    [Work(key, fakes.deaf) for key in range(2)])
print("returned", signal, flush=True)
"""


def test_a_first_signal_asks_every_worker_to_stop_and_a_second_kills_them_all() -> None:
    script = SCRIPT.format(here=str(Path(__file__).parent))
    env = {  # the default start method: the zygote holds the group's signals back, its workers take them
        **{key: value for key, value in os.environ.items() if key != START_METHOD},
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")]),
    }
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    assert process.stdout is not None
    try:
        pids = [int(process.stdout.readline().split()[1]) for _ in range(2)]
        process.send_signal(signal.SIGTERM)
        heard = sorted(process.stdout.readline().split() for _ in range(2))
        assert heard == [["ignoring", str(int(signal.SIGTERM))]] * 2
        assert all(running(pid) for pid in pids) and process.poll() is None
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        process.kill()
        process.wait()
    deadline = time.monotonic() + 10
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(running(pid) for pid in pids)


def test_work_that_may_not_start_yet_is_asked_again_and_ends_the_run_once_none_runs() -> None:
    """A None pulled means "not yet" (a parallel search's next trial waits for the trial K places
    before it): asked again as workers end, and the run ends when no worker is left to change that."""
    watch = Watch()
    log: list[str] = []

    def on_message(key: int, message: Any) -> bool:
        ended = watch.on_message(key, message)
        if ended:
            log.append(f"ended {key}")
        return ended

    def pending() -> Iterator[Work | None]:
        yield Work(0, sleeper, (2.0,))
        yield Work(1, sleeper, (0.0,))
        while "ended 0" not in log:
            yield None
        log.append("pulled 2")
        yield Work(2, sleeper, (0.0,))
        while True:  # never again: nothing runs once 2 ends, so the run ends
            yield None

    Supervisor(on_message, watch.on_silent_death, at_most=2, handle_signals=False).run(pending())
    assert log == ["ended 1", "ended 0", "pulled 2", "ended 2"]
    assert_nothing_left(watch)


def test_a_run_in_a_process_with_a_child_of_its_own_returns_and_leaves_it_alone() -> None:
    """The caller's own multiprocessing child (a pool, a process an earlier command left) holds the
    resource tracker's pipe: the run neither waits for that child nor stops the caller's tracker
    (multiprocessing's own tracker stop waited for the child without limit: stop 60's CI hung)."""
    import multiprocessing

    found = resource_tracker._resource_tracker._pid  # an earlier test in this process may have started one
    theirs = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(120,))
    theirs.start()
    try:
        tracker = resource_tracker._resource_tracker._pid
        watch = Watch()
        started = time.monotonic()
        assert supervise(watch, [Work(0, chatty, (3,))]) == 0
        assert time.monotonic() - started < 60 and theirs.is_alive()
        assert resource_tracker._resource_tracker._pid == tracker
    finally:
        theirs.kill()
        theirs.join()
        if found is None:  # as this test found it: its child started the tracker
            resource_tracker._resource_tracker._stop()
