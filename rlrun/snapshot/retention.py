"""Which snapshots a session keeps: the newest `keep` periodic ones, the best (by evaluation) and
the newest of all, which is the one a resume continues from. Shared by the training loop, which
applies it after every snapshot, and by `rlrun gc`. No torch here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class _Checkpoint(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def frame(self) -> int: ...
    @property
    def kind(self) -> str: ...


def kinds(checkpoint: _Checkpoint) -> list[str]:
    return checkpoint.kind.split("+")


def to_keep(checkpoints: Sequence[_Checkpoint], keep_periodic: int) -> set[int]:
    """Ids of the snapshots to keep among one session's `checkpoints`."""
    if not checkpoints:
        return set()
    by_frame = sorted(checkpoints, key=lambda c: c.frame)
    periodic = [c for c in by_frame if "periodic" in kinds(c)]
    best = [c for c in by_frame if "best" in kinds(c)]
    newest_periodic = periodic[-keep_periodic:] if keep_periodic > 0 else []
    return {c.id for c in newest_periodic} | {c.id for c in best[-1:]} | {by_frame[-1].id}
