"""What a snapshot's `meta.json` holds: everything plain-JSON a session needs to continue, typed.

The record maps one to one onto the file's keys, so `from_json(to_json(x)) == x` and a file read
and written again is byte for byte the same (`rlrun.snapshot.layout.json_bytes`). Nested values that
are someone else's format (the spec, captured env state, random-generator states, evaluation rows)
stay plain JSON.

Keys added after the first release are optional (`OPTIONAL`): None means the key is absent, so an
older file still reads, and writes back, byte for byte. The training metrics history is not here:
it is the session's metrics log (`rlrun.session.metrics_log`); older snapshots that carried it in `metrics`
still load.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from rlrun.clock import Clock


@dataclass(frozen=True)
class Best:
    """The best training evaluation so far (the mean of its returns), which survives a resume."""

    frame: int
    mean: float


@dataclass(frozen=True)
class RandomStates:
    """The session's random generators outside torch (torch's own is a tensor, in state.pt)."""

    python: list[Any]
    """`random.getstate()` as a list: version, the 625 state words, the cached Gaussian."""
    numpy: dict[str, Any]
    """`np.random.get_state(legacy=False)` with its key array as a list."""
    eval_env: dict[str, Any] | None
    """The evaluation env's generator (None before its first reset)."""


@dataclass(frozen=True)
class SnapshotMeta:
    kind: str
    """Why it was written, "+"-joined: periodic, best, final, preempt."""
    run_id: str
    session_index: int
    seed: int
    clock: Clock
    spec: dict[str, Any]
    """The spec document the session trained with (its current revision)."""
    random: RandomStates
    env: Any
    """The training env's captured state (None when it could not be captured)."""
    env_note: str | None
    """Why the env's state could not be captured (None when it was)."""
    obs: list[Any]
    """The observation the next action is chosen from, one row per env copy."""
    obs_dtype: str
    episode_return: list[float]
    """Return so far of each env copy's unfinished episode."""
    episode_length: list[int]
    recent_returns: list[float]
    """Returns of the latest finished episodes (the training return mean)."""
    last_losses: dict[str, float]
    """The scalars of the algorithm's latest update (the next metrics row repeats them)."""
    evaluations: list[dict[str, Any]]
    """Every training evaluation so far: frame, returns, lengths."""
    best: Best | None
    recent_lengths: list[int] | None = None
    """Lengths of the latest finished episodes (the training length mean); None in older files."""
    metrics: list[dict[str, Any]] | None = None
    """Older files only: the metrics history, which now lives in the session's metrics log."""
    device: str | None = None
    """Where the networks learned: "cpu" or "cuda:N" (None in older files, all taken on the CPU)."""
    gpu: str | None = None
    """The GPU's model name (None on the CPU): a resume is exact only on the same model."""

    eval_wrappers: list[Any] | None = None
    """The evaluation env's `env.wrappers` state (counters, statistics they keep across evaluations) as
    plain attributes per wrapper layer; None without user wrappers (and in older files)."""

    stack: dict[str, str] | None = None
    """The software the session ran on (`rlrun.session.stack.software_stack`): a resume is exact only on
    the same versions; None in older files."""

    OPTIONAL: ClassVar[tuple[str, ...]] = ("recent_lengths", "metrics", "device", "gpu", "eval_wrappers", "stack")

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        return {key: value for key, value in data.items() if not (key in self.OPTIONAL and value is None)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SnapshotMeta:
        """The record of a parsed meta.json; a missing or unknown key is a TypeError."""
        best = data["best"]
        return cls(
            **{
                **data,
                "clock": Clock.from_json(data["clock"]),
                "random": RandomStates(**data["random"]),
                "best": None if best is None else Best(**best),
            }
        )
