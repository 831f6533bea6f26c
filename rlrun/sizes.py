"""Human sizes for frame counts: `20M`, `1.5M`, `500k`, `2e6`, `20_000`. Millions take a capital
`M` only: a lowercase `m` means minutes in durations (`--since 90m`), so `20m` is refused with the
fix rather than read one way here and the other way there."""

from __future__ import annotations

import math
import re

from rlrun.errors import SizeError

_SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "b": 10**9}
_SIZE = re.compile(r"^\s*(?P<number>[0-9][0-9_]*(?:\.[0-9_]*)?(?:e[+-]?[0-9]+)?)\s*(?P<suffix>[kmgb]?)\s*$", re.I)

EXAMPLES = "20M, 1.5M, 500k, 2e6 or 20_000"

# The largest count rlrun takes: far beyond any training budget (a million G), and far inside the
# 64-bit integers that the registry, the clock and the snapshots store frames in.
MAX_SIZE = 10**15
MAX_SIZE_TEXT = "1e15"


def parse_size(text: str | int | float, *, what: str = "size") -> int:
    """Parse a whole count from 0 to MAX_SIZE; a fraction that does not land on a whole number is an
    error. Numbers (a spec's JSON) are checked the same way as text."""
    shown = f"{text:g}" if isinstance(text, float) else repr(text)  # 2e+15, not 2000000000000000.0
    if isinstance(text, bool):
        raise SizeError(f"{what}: {shown} is not a size; use a count like {EXAMPLES}")
    if isinstance(text, int | float):
        value: float = text
    else:
        match = _SIZE.match(text)
        if match is None or match["number"].startswith("_") or "__" in match["number"]:
            raise SizeError(f"{what}: {shown} is not a size; use a count like {EXAMPLES}")
        if match["suffix"] == "m":  # lowercase m is minutes wherever rlrun takes a duration (--since 90m)
            raise SizeError(
                f"{what}: {shown} has a lowercase m, which rlrun reads as minutes elsewhere;"
                f" write {match['number']}M for millions of frames"
            )
        value = float(match["number"].replace("_", "")) * _SUFFIXES[match["suffix"].lower()]
    if value > MAX_SIZE:
        raise SizeError(
            f"{what}: {shown} is more than {MAX_SIZE_TEXT}, the largest count rlrun takes; use a count like {EXAMPLES}"
        )
    if not math.isfinite(value) or value != int(value):
        raise SizeError(f"{what}: {shown} is not a whole number of frames; use a count like {EXAMPLES}")
    if value < 0:
        raise SizeError(f"{what}: {shown} is negative; use a count like {EXAMPLES}")
    return int(value)


def format_size(count: int | float) -> str:
    """Short display form: 1500000 -> 1.5M, 20000 -> 20k."""
    for suffix, factor in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if abs(count) >= factor:
            return f"{count / factor:.4g}{suffix}"
    return f"{count:g}"
