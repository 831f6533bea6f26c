from __future__ import annotations

import pytest

from rlrun.errors import SizeError
from rlrun.sizes import format_size, parse_size
from rlrun.spec.schedules import Constant, Exponential, Linear, Piecewise, Schedule


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("20M", 20_000_000),
        ("1.5M", 1_500_000),
        ("500k", 500_000),
        ("500K", 500_000),
        ("2e6", 2_000_000),
        ("20_000", 20_000),
        ("12", 12),
        (" 3k ", 3000),
        (7, 7),
        ("1g", 10**9),
    ],
)
def test_sizes(text: str | int, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1.2345k", "-5", "_1", "1__0", "1e400", "nan", "5 M x", "0.5"])
def test_bad_sizes_name_the_value_and_the_accepted_forms(text: str) -> None:
    with pytest.raises(SizeError, match=r"use a count like 20M, 1.5M, 500k, 2e6 or 20_000"):
        parse_size(text, what="--frames")


def test_sizes_stop_at_1e15_text_or_number() -> None:
    assert parse_size("1e15") == parse_size(10**15) == parse_size(1e15) == 10**15
    for too_large in ("1000001G", 10**15 + 1, 1e99, "1e400"):
        with pytest.raises(SizeError, match="is more than 1e15, the largest count rlrun takes; use a count like"):
            parse_size(too_large, what="--frames")
    with pytest.raises(SizeError, match=r"1\.5 is not a whole number of frames"):
        parse_size(1.5)


def test_a_lowercase_m_is_refused_as_minutes_not_millions() -> None:
    """Issue 27.13: `--since 90m` is minutes, so `--frames 20m` is not silently 20 million."""
    with pytest.raises(
        SizeError,
        match=r"^--frames: '20m' has a lowercase m, which rlrun reads as minutes elsewhere;"
        r" write 20M for millions of frames$",
    ):
        parse_size("20m", what="--frames")
    assert parse_size("20M") == 20 * 10**6


def test_format_size() -> None:
    assert [format_size(n) for n in (999, 20_000, 1_500_000, 3 * 10**9)] == ["999", "20k", "1.5M", "3G"]


def test_schedules_are_pure_functions_of_the_frame() -> None:
    assert Constant(value=0.3).value(123, 1000) == 0.3
    linear = Linear(kind="linear", start=1.0, end=0.0, from_frame=100, to_frame=300)
    assert [linear.value(f, 10**6) for f in (0, 100, 200, 300, 10**5)] == [1.0, 1.0, 0.5, 0.0, 0.0]
    assert not linear.depends_on_max_frame()
    tied = Linear(kind="linear", start=1.0, end=0.0)
    assert tied.value(50, 100) == 0.5 and tied.value(50, 200) == 0.75 and tied.depends_on_max_frame()
    steps = Piecewise(kind="piecewise", points=[(0, 1.0), (10, 0.5)], interpolation="step")
    assert [steps.value(f, 0) for f in (0, 9, 10, 99)] == [1.0, 1.0, 0.5, 0.5]
    ramp = Piecewise(kind="piecewise", points=[(0, 1.0), (10, 0.0)])
    assert ramp.value(5, 0) == 0.5
    decay = Exponential(kind="exponential", start=1.0, rate=0.5, every=10, floor=0.2)
    assert [decay.value(f, 0) for f in (0, 10, 20, 100)] == [1.0, 0.5, 0.25, 0.2]


def test_piecewise_points_must_increase() -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        Piecewise(kind="piecewise", points=[(10, 1.0), (5, 0.0)])


@pytest.mark.parametrize(
    ("schedule", "problem"),
    [
        (Constant(value=1e-3), None),
        (Constant(value=0.0), "must be greater than 0"),
        (Linear(kind="linear", start=1e-3, end=0.0), None),
        (Linear(kind="linear", start=0.0, end=1e-3), "start is 0; it must be greater than 0"),
        (Linear(kind="linear", start=1e-3, end=-1e-4), "end is -0.0001; it must be greater than or equal to 0"),
        (Piecewise(kind="piecewise", points=[(0, 1e-3), (10, 5e-4), (20, 0.0)]), None),
        (
            Piecewise(kind="piecewise", points=[(0, 1e-3), (10, 0.0), (20, 1e-3)]),
            "the value at frame 10 is 0; it must be greater than 0",
        ),
        (Piecewise(kind="piecewise", points=[(0, 0.0)]), "the value at frame 0 is 0; it must be greater than 0"),
        (Exponential(kind="exponential", start=1e-3, rate=0.5, every=10), None),
        (Exponential(kind="exponential", start=-1.0, rate=0.5, every=10), "start is -1; it must be greater than 0"),
    ],
)
def test_a_positive_setting_may_only_end_at_zero(schedule: Schedule, problem: str | None) -> None:
    assert schedule.not_positive() == problem
