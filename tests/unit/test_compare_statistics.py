"""`rlrun.compare.statistics` is rliable called as its README calls it (issue 41): the same scores and
seed give rliable's own numbers, and the caller's NumPy global generator is left as it was."""

from __future__ import annotations

import numpy as np
import pytest

rliable = pytest.importorskip("rliable", reason="the compare extra is not installed (pip install 'rlrun[compare]')")

from rlrun.compare import statistics  # noqa: E402


def test_aggregates_and_improvement_are_rliables_and_leave_the_global_generator_alone() -> None:
    from rliable import library as rly
    from rliable import metrics

    rng = np.random.default_rng(3)
    scores = {"a": rng.normal(1.0, 0.3, (5, 4)), "b": rng.normal(0.8, 0.3, (5, 4))}
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    mine = statistics.aggregates(scores, reps=300, seed=9)
    probability = statistics.improvements({"a,b": (scores["a"], scores["b"])}, reps=100, seed=9)
    assert np.array_equal(np.random.get_state()[1], before)  # a guest in the caller's process

    np.random.seed(9)
    points, intervals = rly.get_interval_estimates(scores, statistics.aggregate_function(metrics), reps=300)
    for name in scores:
        for i, metric in enumerate(statistics.AGGREGATES):
            assert mine[name][metric] == (points[name][i], intervals[name][0][i], intervals[name][1][i])
    np.random.seed(9)
    point, interval = rly.get_interval_estimates(
        {"a,b": (scores["a"], scores["b"])}, metrics.probability_of_improvement, reps=100
    )
    assert probability["a,b"] == (point["a,b"], *np.ravel(interval["a,b"]))


def test_a_tick_per_evaluation_of_the_statistic_for_a_progress_bar() -> None:
    """Issue 53: what `rlrun compare`'s progress bar counts: `calls(reps)` per group and per pair."""
    rng = np.random.default_rng(5)
    scores = {"a": rng.normal(size=(3, 2)), "b": rng.normal(size=(4, 2))}
    ticks: list[None] = []
    plain = statistics.aggregates(scores, reps=40, seed=1)
    assert statistics.aggregates(scores, reps=40, seed=1, tick=lambda: ticks.append(None)) == plain
    assert len(ticks) == 2 * statistics.calls(40)
    ticks.clear()
    statistics.improvements({"a,b": (scores["a"], scores["b"])}, reps=30, seed=1, tick=lambda: ticks.append(None))
    assert len(ticks) == statistics.calls(30)
