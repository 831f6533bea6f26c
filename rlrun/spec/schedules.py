"""Declarative schedules: values that are pure functions of the clock's frame.

A spec never holds code. A scheduled setting is either a plain number or one of these objects, and
its value at frame `f` depends only on `f` (and, for `"max_frame"`-anchored schedules, on the
run's frame budget). That purity is what makes resume exact and spec edits checkable.
"""

from __future__ import annotations

import bisect
import math
from itertools import pairwise
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_serializer, model_validator

from rlrun.spec.problems import KeyProblem

MAX_FRAME: Final = "max_frame"
FrameAnchor = Annotated[int, Field(ge=0)] | Literal["max_frame"]


class _ScheduleBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    def value(self, frame: int, max_frame: int) -> float:
        raise NotImplementedError

    def depends_on_max_frame(self) -> bool:
        """True when some value of the schedule moves if the run's frame budget changes."""
        return False

    def not_positive(self) -> str | None:
        """What keeps the schedule of a positive setting (a learning rate) from being one: a value
        at or below 0, or below 0 where it ends (decaying to 0 is common); None when it is."""
        raise NotImplementedError


def _above_zero(name: str, value: float) -> str | None:
    return None if value > 0 else f"{name} is {value:g}; it must be greater than 0"


def _at_least_zero(name: str, value: float) -> str | None:
    return None if value >= 0 else f"{name} is {value:g}; it must be greater than or equal to 0"


def _anchor(frame: int | str, max_frame: int) -> int:
    return max_frame if frame == MAX_FRAME else int(frame)


class Constant(_ScheduleBase):
    """The same value at every frame (written in a spec as a plain number)."""

    kind: Literal["constant"] = "constant"
    value_: float = Field(alias="value")

    def value(self, frame: int, max_frame: int) -> float:
        return self.value_

    @model_serializer
    def _as_number(self) -> float:
        return self.value_

    def not_positive(self) -> str | None:
        return None if self.value_ > 0 else "must be greater than 0"


class Linear(_ScheduleBase):
    """Moves linearly from `start` at `from_frame` to `end` at `to_frame`, flat outside."""

    kind: Literal["linear"]
    start: float
    """Value up to and at `from_frame`."""
    end: float
    """Value at and after `to_frame`."""
    from_frame: FrameAnchor = 0
    """Frame where the change begins."""
    to_frame: FrameAnchor = MAX_FRAME
    """Frame where the change ends: a count, or "max_frame" to end with the run's budget."""

    def value(self, frame: int, max_frame: int) -> float:
        begin, finish = _anchor(self.from_frame, max_frame), _anchor(self.to_frame, max_frame)
        if frame >= finish:
            return self.end
        if frame <= begin:
            return self.start
        return self.start + (self.end - self.start) * (frame - begin) / (finish - begin)

    def depends_on_max_frame(self) -> bool:
        return MAX_FRAME in (self.from_frame, self.to_frame) and self.start != self.end

    def not_positive(self) -> str | None:
        return _above_zero("start", self.start) or _at_least_zero("end", self.end)


class Piecewise(_ScheduleBase):
    """Values pinned at frames, joined linearly (or held, with "step"); flat beyond the ends."""

    kind: Literal["piecewise"]
    points: list[tuple[Annotated[int, Field(ge=0)], float]] = Field(min_length=1)
    """[[frame, value], ...] in increasing frame order."""
    interpolation: Literal["linear", "step"] = "linear"
    """"linear" joins the points; "step" holds each value until the next point."""

    @model_validator(mode="after")
    def _frames_increase(self) -> Piecewise:
        frames = [frame for frame, _ in self.points]
        if any(b <= a for a, b in pairwise(frames)):
            raise KeyProblem("points", "must be in strictly increasing frame order")
        return self

    def value(self, frame: int, max_frame: int) -> float:
        frames = [f for f, _ in self.points]
        i = bisect.bisect_right(frames, frame)
        if i == 0:
            return self.points[0][1]
        if i == len(frames) or self.interpolation == "step":
            return self.points[i - 1][1]
        (f0, v0), (f1, v1) = self.points[i - 1], self.points[i]
        return v0 + (v1 - v0) * (frame - f0) / (f1 - f0)

    def not_positive(self) -> str | None:
        *before, (last_frame, last) = self.points
        found = [_above_zero(f"the value at frame {frame}", value) for frame, value in before]
        found.append((_at_least_zero if before else _above_zero)(f"the value at frame {last_frame}", last))
        return next(filter(None, found), None)


class Exponential(_ScheduleBase):
    """`start * rate ** (frame / every)`, never below `floor`."""

    kind: Literal["exponential"]
    start: float
    rate: float = Field(gt=0)
    """Factor applied every `every` frames (below 1 decays)."""
    every: int = Field(gt=0)
    floor: float = -math.inf
    """Lower bound on the value."""

    def value(self, frame: int, max_frame: int) -> float:
        return max(self.floor, self.start * self.rate ** (frame / self.every))

    def not_positive(self) -> str | None:
        return _above_zero("start", self.start)  # a positive rate keeps every later value above 0


def _number_as_constant(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            raw = float(raw)
        except ValueError:
            example = '{"kind": "linear", "start": 0.001, "end": 0}'
            raise ValueError(f"expected a number or a schedule such as {example}") from None
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return {"kind": "constant", "value": raw}
    return raw


Schedule = Annotated[
    Constant | Linear | Piecewise | Exponential,
    BeforeValidator(_number_as_constant),
    Field(discriminator="kind"),
]
"""A scheduled setting: a number, or {"kind": "linear" | "piecewise" | "exponential", ...}."""
