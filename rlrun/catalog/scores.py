"""How a score (an evaluation's return, a trial's value) is written for a person: in tables, live
lines, search and PBT lines, notes and plot labels alike. The one rule: at least four significant
digits and one decimal, trailing zeros dropped (0.954, 25.5, 111.5, 500.0, 12345.6), and in a
column, as many more decimals as it takes for values that differ to read differently, as `--json`
tells them apart. No exponent: a return of 12345.6 reads as itself. Standard library only: the
registry commands use it."""

from __future__ import annotations

import math
from collections.abc import Sequence

_MOST_DECIMALS = 15  # past this a float's digits are noise


def score(value: float | None, extra: int = 0) -> str:
    """One score; `extra` decimals more than the rule's (`scores` asks for them). "-" when none."""
    if value is None or not math.isfinite(value):
        return "-"
    magnitude = math.floor(math.log10(abs(value))) if value else 0
    decimals = min(max(1, 3 - magnitude) + extra, _MOST_DECIMALS)
    trimmed = f"{value:.{decimals}f}".rstrip("0")
    return trimmed + "0" if trimmed.endswith(".") else trimmed


def scores(values: Sequence[float | None]) -> list[str]:
    """Scores that are read side by side (a table's column, a list of trials): as `score`, with the
    fewest extra decimals that keep values that differ apart."""
    finite = [v if v is not None and math.isfinite(v) else None for v in values]
    shown = [score(v) for v in finite]
    for extra in range(1, _MOST_DECIMALS + 1):
        read_as: dict[str, float | None] = {}
        if all(read_as.setdefault(text, v) == v for text, v in zip(shown, finite, strict=True)):
            break
        shown = [score(v, extra) for v in finite]
    return shown


def spread(mean: float, std: float) -> str:
    """An evaluation's mean ± standard deviation."""
    return f"{score(mean)} ± {score(std)}"
