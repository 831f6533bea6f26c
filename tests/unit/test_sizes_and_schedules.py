from __future__ import annotations

import pytest

from rlrun.errors import SizeError
from rlrun.schedules import Constant, Exponential, Linear, Piecewise
from rlrun.sizes import format_size, parse_size


@pytest.mark.parametrize(
    ("text", "value"),
    [("20M", 20_000_000), ("1.5M", 1_500_000), ("500k", 500_000), ("500K", 500_000), ("2e6", 2_000_000),
     ("20_000", 20_000), ("12", 12), (" 3k ", 3000), (7, 7), ("1g", 10**9)],
)
def test_sizes(text: str | int, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1.2345k", "-5", "_1", "1__0", "1e400", "nan", "5 M x", "0.5"])
def test_bad_sizes_name_the_value_and_the_accepted_forms(text: str) -> None:
    with pytest.raises(SizeError, match=r"use a count like 20M, 1.5M, 500k, 2e6 or 20_000"):
        parse_size(text, what="--frames")


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
