"""Comparisons (`rlrun compare`): is B better than A? A function of the registry (DESIGN.md,
"Comparisons"): sessions are seeds, envs are tasks, evaluations are the scores; the statistics come
from rliable (the optional extra `compare`), never re-derived; two runs that trained bit for bit
alike are `identical`, said before any statistics.

    runs        which runs the references name (searches' trials and populations' members too) and
                each session's evaluations
    normalize   scores on one scale across tasks: Atari human-normalised, min-max by a known range
    statistics  the calls to rliable, and the only module that imports it
    identity    whether two runs are the same run, bit for bit (the gate's first question)
    comparison  the groups, their score matrices, the numbers and the verdict: `compare`
    figure      the report image: interval estimates, performance profiles, IQM over frames

Read-only; no torch or gymnasium (a comparison answers from the registry and the run folders).
"""

from __future__ import annotations

from rlrun.compare.comparison import (
    DEFAULT_REPS,
    DEFAULT_SEED,
    PAPER_REPS,
    VERDICTS,
    Comparison,
    GroupResult,
    Improvement,
    compare,
    verdict_of,
)

__all__ = [
    "DEFAULT_REPS",
    "DEFAULT_SEED",
    "PAPER_REPS",
    "VERDICTS",
    "Comparison",
    "GroupResult",
    "Improvement",
    "compare",
    "verdict_of",
]
