"""A session's store jobs (`rlrun.session.uploads`): run in the order handed over, off the calling
thread, each after its lease check; a file's superseded copies are never put; and which snapshots a
full queue may drop (`rlrun.session.checkpoints._superseded`)."""

from __future__ import annotations

import threading

import pytest

from rlrun.errors import StoreUnreachable
from rlrun.session.checkpoints import _superseded
from rlrun.session.uploads import Uploads


def test_jobs_run_in_order_off_the_calling_thread_each_after_the_fence() -> None:
    seen: list[str] = []
    uploads = Uploads(lambda: seen.append("fence"))
    caller = threading.get_ident()
    threads: set[int] = set()

    def job(name: str) -> None:
        seen.append(name)
        threads.add(threading.get_ident())

    for name in ("a", "b", "c"):
        uploads.submit(lambda name=name: job(name))  # type: ignore[misc]
    uploads.drain()
    assert seen == ["fence", "a", "fence", "b", "fence", "c"]
    assert caller not in threads
    uploads.close()


def test_a_store_that_does_not_answer_is_tried_again_and_a_refusal_is_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rlrun.storage.time.sleep", lambda _: None)
    tries: list[int] = []

    def flaky() -> None:
        tries.append(1)
        if len(tries) < 3:
            raise StoreUnreachable("the store does not answer")

    uploads = Uploads(lambda: None)
    uploads.submit(flaky)
    uploads.drain()
    assert len(tries) == 3

    def refused() -> None:
        raise PermissionError("access denied")

    uploads.submit(refused)
    with pytest.raises(PermissionError):
        uploads.drain()
    uploads.close()


def test_only_the_newest_copy_of_a_file_is_put() -> None:
    gate, put = threading.Event(), []
    uploads = Uploads(lambda: None)
    uploads.submit(gate.wait)  # the store is busy with an earlier job meanwhile
    for copy in ("rows to 1k", "rows to 2k", "rows to 3k"):
        uploads.submit_newest("metrics.csv", lambda copy=copy: put.append(copy))  # type: ignore[misc]
    gate.set()
    uploads.drain()
    assert put == ["rows to 3k"]
    uploads.close()


@pytest.mark.parametrize(
    ("kind", "later", "dropped"),
    [
        ("periodic", [], True),
        ("best+periodic", ["periodic"], False),
        ("best+periodic", ["periodic", "best"], True),
        ("best", [], False),
        ("periodic+final", [], False),
        ("preempt", ["best"], False),
    ],
)
def test_a_full_queue_drops_only_what_retention_would_not_keep(kind: str, later: list[str], dropped: bool) -> None:
    assert _superseded(kind, later) is dropped
