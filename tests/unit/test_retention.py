from __future__ import annotations

from dataclasses import dataclass

import pytest

from rlrun.snapshot.retention import to_keep


@dataclass
class Checkpoint:
    id: int
    frame: int
    kind: str


HISTORY = [
    Checkpoint(1, 1000, "best+periodic"),
    Checkpoint(2, 2000, "periodic"),
    Checkpoint(3, 3000, "periodic"),
    Checkpoint(4, 3500, "best"),
    Checkpoint(5, 4000, "periodic"),
    Checkpoint(6, 4321, "preempt"),
]


@pytest.mark.parametrize(
    ("keep", "expected"),
    [(0, {4, 6}), (1, {4, 5, 6}), (2, {3, 4, 5, 6}), (4, {1, 2, 3, 4, 5, 6}), (10, {1, 2, 3, 4, 5, 6})],
)
def test_keeps_newest_periodic_the_best_and_the_newest(keep: int, expected: set[int]) -> None:
    assert to_keep(HISTORY, keep) == expected


def test_fewer_periodic_snapshots_than_kept_keeps_them_all() -> None:
    assert to_keep(HISTORY[:2], 3) == {1, 2}
    assert to_keep([], 3) == set()
