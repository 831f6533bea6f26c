"""The statistics of a comparison, every number from rliable itself (Agarwal et al., NeurIPS 2021),
called exactly as its documentation shows, never re-derived here: interquartile mean, median, mean
and optimality gap of each group's score matrix (seeds x tasks) with stratified-bootstrap
confidence intervals; the probability of improvement between groups with its interval; performance
profiles and IQM-over-frames curves for the figure.

Determinism. rliable's stratified bootstrap draws its resamples from NumPy's global generator
(`np.random.choice`), not from the `random_state` it accepts (which arch deprecates), so each call
below seeds that generator with the comparison's seed first, and NumPy's global state is put back
afterwards: rlrun is a guest in the caller's process. The same
scores, seed and repetitions give the same numbers, and a caller who makes the same calls to rliable
after `np.random.seed(seed)` gets them too (tests/test_compare.py does).

rliable is the optional extra `compare`, imported here only, when a comparison is computed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from rlrun.errors import BadInput, install_hint

AGGREGATES = ("median", "iqm", "mean", "optimality_gap")
"""The order of the aggregate function's outputs: rliable's own examples' order."""
FIGURE_REPS = 2000
"""Bootstrap repetitions behind the figure's bands (rliable's default for performance profiles, and
the RL Zoo's for both): the bands are drawn, not reported, and a curve costs a bootstrap per point."""
CONFIDENCE = 0.95

Tick = Callable[[], None]
"""Called once per evaluation of a statistic on a resample (and once on the scores themselves):
what a progress bar over the bootstrap counts."""


def calls(reps: int) -> int:
    """How many times one `get_interval_estimates` entry (a group, or a pair) evaluates its
    statistic: once per repetition, and twice on the scores themselves (rliable's point estimate,
    and arch's own before it resamples)."""
    return reps + 2


def _counted(func: Any, tick: Tick | None) -> Any:
    if tick is None:
        return func

    def counted(*args: Any, **kwargs: Any) -> Any:
        tick()
        return func(*args, **kwargs)

    return counted


def rliable() -> tuple[Any, Any]:
    """rliable's `library` and `metrics` modules, or bad input saying how to install them."""
    try:
        from rliable import library, metrics
    except ImportError:
        raise BadInput(f"rlrun compare needs rliable: {install_hint('compare')}") from None
    return library, metrics


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """NumPy's global generator seeded with `seed` for the block, and put back after it."""
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(saved)


def aggregate_function(metrics: Any) -> Any:
    """The four aggregates of a score matrix, as rliable's README computes them."""
    return lambda x: np.array(
        [
            metrics.aggregate_median(x),
            metrics.aggregate_iqm(x),
            metrics.aggregate_mean(x),
            metrics.aggregate_optimality_gap(x),
        ]
    )


class Estimate(NamedTuple):
    point: float
    low: float
    high: float


def aggregates(
    scores: Mapping[str, np.ndarray], *, reps: int, seed: int, tick: Tick | None = None
) -> dict[str, dict[str, Estimate]]:
    """Each group's median, IQM, mean and optimality gap with their 95% stratified-bootstrap
    intervals: one `rly.get_interval_estimates` call over every group, after `np.random.seed(seed)`;
    `tick` is called `calls(reps)` times per group."""
    library, metrics = rliable()
    with seeded(seed):
        points, intervals = library.get_interval_estimates(
            dict(scores), _counted(aggregate_function(metrics), tick), reps=reps, confidence_interval_size=CONFIDENCE
        )
    return {
        name: {
            metric: Estimate(_number(points[name][i]), _number(intervals[name][0][i]), _number(intervals[name][1][i]))
            for i, metric in enumerate(AGGREGATES)
        }
        for name in scores
    }


def improvements(
    pairs: Mapping[str, tuple[np.ndarray, np.ndarray]], *, reps: int, seed: int, tick: Tick | None = None
) -> dict[str, Estimate]:
    """P(X > Y) for each pair `(X, Y)`, with its interval: one `rly.get_interval_estimates` call
    with `metrics.probability_of_improvement` over every pair, after `np.random.seed(seed)`; `tick`
    is called `calls(reps)` times per pair."""
    if not pairs:
        return {}
    library, metrics = rliable()
    with seeded(seed):
        points, intervals = library.get_interval_estimates(
            dict(pairs),
            _counted(metrics.probability_of_improvement, tick),
            reps=reps,
            confidence_interval_size=CONFIDENCE,
        )
    return {
        key: Estimate(_number(points[key]), _number(intervals[key][0]), _number(intervals[key][1])) for key in pairs
    }


def _number(value: Any) -> float:
    """A Python float from rliable's scalar or one-element array."""
    return float(np.ravel(value)[0])


def profiles(
    scores: Mapping[str, np.ndarray], taus: np.ndarray, *, seed: int
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each group's performance profile (the fraction of runs scoring above each tau) and its band."""
    library, _ = rliable()
    with seeded(seed):
        points, intervals = library.create_performance_profile(
            dict(scores), taus, reps=FIGURE_REPS, confidence_interval_size=CONFIDENCE
        )
    return {name: (np.asarray(points[name]), np.asarray(intervals[name])) for name in scores}


def iqm_curves(curves: Mapping[str, np.ndarray], *, seed: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each group's IQM at each evaluation point (scores: seeds x tasks x points) and its band."""
    library, metrics = rliable()

    def iqm(scores: np.ndarray) -> np.ndarray:
        return np.array([metrics.aggregate_iqm(scores[..., point]) for point in range(scores.shape[-1])])

    with seeded(seed):
        points, intervals = library.get_interval_estimates(
            dict(curves), iqm, reps=FIGURE_REPS, confidence_interval_size=CONFIDENCE
        )
    return {name: (np.asarray(points[name]), np.asarray(intervals[name])) for name in curves}
