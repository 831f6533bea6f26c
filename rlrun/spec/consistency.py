"""Past-future consistency: may a spec edit be applied to a run already trained to frame F?

An edit is consistent when training over [0, F] under the edited spec would have been exactly what
happened. So record-only settings may change freely (and the device, though a resume that moves
to another one is recorded as approximate); every scheduled value must be equal at every
frame in [0, F] under both specs (checked exactly for piecewise-linear schedules, by comparing
them at every breakpoint of either and at the ends); everything else is structural and may not
change. `--fork` branches a new run instead, and only refuses what a snapshot cannot be loaded
into (different networks, env or algorithm).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic import BaseModel

from rlrun.arithmetic import revision
from rlrun.errors import EditRefused
from rlrun.spec import Spec
from rlrun.spec.agents.dqn import importance_exponent
from rlrun.spec.schedules import Constant, Exponential, Linear, Piecewise, _anchor, _ScheduleBase
from rlrun.spec.sections import SlurmSpec

RECORD_ONLY = {
    "name",
    "meta.eval_frequency",
    "meta.num_eval_episodes",
    "meta.eval_deterministic",
    "meta.eval_epsilon",
    "meta.eval_max_steps",
    "meta.eval_overlap",
    "meta.eval_video",
    "meta.checkpoint_frequency",
    "meta.keep_checkpoints",
    "meta.log_frequency",
    "meta.track",
    # which processes step the copies: the same bits in the session's process, in blocks
    # (`rlrun.envs.workers`) or one process each ("async"): `rlrun.envs.make_vector_env`
    "env.vectorization",
    "env.workers",
}
# Where the networks learn: a resume may move them (a GPU snapshot continues on the CPU, or on
# another GPU); the registry records that resume as approximate when the device differs.
PLACEMENT = {"meta.device"}
# Where and how `--slurm` submits the jobs (the section whole when one side has none): nothing trained
# depends on it, so a resume may change any of it and stays exact.
SUBMISSION = {"meta.slurm", *(f"meta.slurm.{key}" for key in SlurmSpec.model_fields)}
# What a fork cannot change: the snapshot's tensors and env state would not fit.
FORK_FIXED = (
    "agent.algorithm",
    "agent.network",
    "agent.dueling",
    "env.id",
    "env.num_envs",
    "env.kwargs",
    "env.frame_stack",
    "env.atari",
    "env.wrappers",
    "env.normalize",
    "data.normalize",
    "meta.sessions",
    "meta.seed",
)
# Settings compared whole, with why they may not change: nothing about them is record-only, and
# no edit of them could have been there from the start (every step trained so far went through them).
WHOLE = {
    "env.wrappers": "structural: every observation, action and reward trained on so far went through these wrappers",
    "env.normalize": "structural: every observation and reward learned from so far was normalised this way "
    "(and the running statistics were gathered under it)",
}

Kind = Literal["record-only", "placement", "schedule", "budget", "structural"]

__all__ = ["Change", "EditRefused", "check_edit", "diff", "diff_json", "fork_conflicts"]


@dataclass(frozen=True)
class Change:
    path: str
    old: Any
    new: Any
    kind: Kind
    allowed: bool
    reason: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def flatten(spec: Spec) -> dict[str, Any]:
    """Every setting by dotted path; schedules stay whole (they are compared as functions)."""
    out: dict[str, Any] = {}

    def walk(value: Any, path: str) -> None:
        if isinstance(value, _ScheduleBase) or path in WHOLE:
            out[path] = value
        elif isinstance(value, BaseModel):
            for name in type(value).model_fields:
                walk(getattr(value, name), f"{path}.{name}" if path else name)
        else:
            out[path] = value

    walk(spec, "")
    return out


def _shown(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, list):
        return [_shown(item) for item in value]
    return value


def diff(old: Spec, new: Spec) -> list[tuple[str, Any, Any]]:
    """(path, old, new) for every setting that differs, in path order. A section one side sets and
    the other leaves null (`agent.network.recurrent`, `env.atari`) is one difference, the section whole."""
    a, b = flatten(old), flatten(new)
    _whole_where_null(a, b, new)
    _whole_where_null(b, a, old)
    missing = object()
    return [
        (path, _shown(a.get(path)), _shown(b.get(path)))
        for path in sorted(a.keys() | b.keys())
        if a.get(path, missing) != b.get(path, missing)
    ]


def _whole_where_null(flat: dict[str, Any], other: dict[str, Any], other_spec: Spec) -> None:
    """Where `flat` has a null section that `other` sets, `other`'s settings in it become the section."""
    for path in [path for path, value in flat.items() if value is None]:
        inside = [key for key in other if key.startswith(path + ".")]
        if not inside:
            continue
        for key in inside:
            del other[key]
        section: Any = other_spec
        for name in path.split("."):
            section = getattr(section, name)
        other[path] = section


def check_edit(old: Spec, new: Spec, frame: int) -> list[Change]:
    """Classify every difference between `old` and `new` for a run trained to `frame`."""
    changes = [
        _classify(path, before, after, old, new, frame)
        for path, before, after in diff(old, new)
        if path != "meta.max_frame"
    ]
    if old.meta.max_frame != new.meta.max_frame:
        changes.append(_budget_change(old, new, frame))
    return sorted(changes, key=lambda c: c.path)


def fork_conflicts(old: Spec, new: Spec) -> list[Change]:
    return [
        Change(path, before, after, "structural", False, "the parent's snapshot cannot be loaded with it")
        for path, before, after in diff(old, new)
        if path.startswith(FORK_FIXED)
    ]


def _classify(path: str, before: Any, after: Any, old: Spec, new: Spec, frame: int) -> Change:
    if path in RECORD_ONLY:
        return Change(path, before, after, "record-only", True, "only changes what is recorded")
    if path in PLACEMENT:
        return Change(path, before, after, "placement", True, "where it learns; on another device it is not exact")
    if path in SUBMISSION:
        return Change(path, before, after, "placement", True, "where its SLURM jobs run; the bits are the same")
    if path == "meta.kernels":
        return _kernels_change(before, after, old, new)
    if path == "meta.stop_at_return":
        return Change(
            path,
            before,
            after,
            "budget",
            True,
            "a target, as max_frame: each session stops at the first"
            " evaluation that reaches it (one that already has: nothing left to train)",
        )
    a, b = flatten(old).get(path), flatten(new).get(path)
    if isinstance(a, _ScheduleBase) and isinstance(b, _ScheduleBase):
        where = first_difference(a, old.meta.max_frame, b, new.meta.max_frame, frame)
        if where is None:
            return Change(path, before, after, "schedule", True, f"equal at every frame up to {frame:,}")
        at, x, y = where
        reason = f"differs at frame {at:,} ({x:g} → {y:g}), already trained"
        return Change(path, before, after, "schedule", False, reason)
    if path in WHOLE:
        return Change(path, before, after, "structural", False, WHOLE[path])
    return Change(path, before, after, "structural", False, "structural: it shaped everything trained so far")


def _kernels_change(before: Any, after: Any, old: Spec, new: Spec) -> Change:
    """`meta.kernels` changes no bit where the run's kernels compute autograd's (record-only then),
    and is structural where one rounds differently."""
    algorithm = new.agent.algorithm
    if all(revision(spec.meta.arithmetic).kernel_is_autograd(spec.agent.algorithm) for spec in (old, new)):
        return Change(
            "meta.kernels",
            before,
            after,
            "record-only",
            True,
            f"{algorithm}'s kernels compute autograd's bits: the same run either way",
        )
    return Change(
        "meta.kernels",
        before,
        after,
        "structural",
        False,
        f"structural: {algorithm}'s kernel at arithmetic {new.meta.arithmetic} rounds differently"
        " from autograd (--fork may switch it)",
    )


def _budget_change(old: Spec, new: Spec, frame: int) -> Change:
    before, after = old.meta.max_frame, new.meta.max_frame
    if after < frame:
        reason = f"below the {frame:,} frames already trained"
        return Change("meta.max_frame", before, after, "budget", False, reason)
    tied = []
    replacements = _schedules(new)
    for path, schedule in _schedules(old).items():
        replacement = replacements.get(path)
        if isinstance(schedule, _ScheduleBase) and isinstance(replacement, _ScheduleBase) and schedule == replacement:
            where = first_difference(schedule, before, replacement, after, frame)
            if where is not None:
                at, x, y = where
                tied.append(f"{path} is tied to max_frame: it would differ at frame {at:,} ({x:g} → {y:g})")
    if tied:
        return Change("meta.max_frame", before, after, "budget", False, "; ".join(tied))
    return Change("meta.max_frame", before, after, "budget", True, "no schedule depends on it before this frame")


def _schedules(spec: Spec) -> dict[str, _ScheduleBase]:
    """Every schedule of `spec` by path, with those a setting implies: prioritised replay's
    importance-sampling exponent, annealed from `beta` to 1 at max_frame (so a longer budget would
    have weighed every sample learnt from so far differently)."""
    out = {path: value for path, value in flatten(spec).items() if isinstance(value, _ScheduleBase)}
    prioritized = getattr(getattr(spec.agent, "memory", None), "prioritized", None)
    if prioritized is not None:
        out["agent.memory.prioritized.beta"] = importance_exponent(prioritized)
    return out


def first_difference(
    a: _ScheduleBase, a_max: int, b: _ScheduleBase, b_max: int, frame: int
) -> tuple[int, float, float] | None:
    """A frame in [0, frame] where two schedules differ, or None when they agree on all of it.

    Piecewise-linear schedules (constant, linear, piecewise) that agree at every breakpoint of
    either and at both ends agree everywhere between, so checking those frames is exact. An
    exponential schedule is only known to agree with an identical one.
    """
    if isinstance(a, Exponential) or isinstance(b, Exponential):
        if a == b:
            return None
        probes = sorted({0, frame} | {frame * i // 1024 for i in range(1025)})
    else:
        probes = sorted({0, frame} | {f for f in _breakpoints(a, a_max) + _breakpoints(b, b_max) if 0 <= f <= frame})
    for at in probes:
        x, y = a.value(at, a_max), b.value(at, b_max)
        if x != y:
            return at, x, y
    return None


def _breakpoints(schedule: _ScheduleBase, max_frame: int) -> list[int]:
    if isinstance(schedule, Linear):
        return [_anchor(schedule.from_frame, max_frame), _anchor(schedule.to_frame, max_frame)]
    if isinstance(schedule, Piecewise):
        return [f for f, _ in schedule.points]
    assert isinstance(schedule, Constant)
    return []


def diff_json(old: Spec, new: Spec) -> str:
    return json.dumps([{"path": p, "old": a, "new": b} for p, a, b in diff(old, new)])
