"""Population-based training's decisions, as pure functions of the search's seed and the members'
recorded scores (no registry, no torch, no Optuna): the driver (`rlrun.search.population`) asks
them at every interval, and a resumed driver asks them again and gets the same answers.

A population of N members trains in generations of `interval` frames. Member m's first values are
drawn from the search space with a generator seeded by (seed, m). At the end of each generation
the members are ranked by score; each of the bottom `quantile` (at most half) takes the snapshot of
a member drawn from the top `quantile` (exploit) and mutates each searched value (explore): with
`resample_probability` it is drawn again from its distribution, otherwise multiplied by one of
`factors` (a choice moves to a neighbouring candidate), as Ray Tune's PopulationBasedTraining does.

A value that changes mid-run is written into the member's spec as a step schedule: "the old
value through frame F, the new one after" (`switch_after`). Such an edit is consistent by the
past-future rule (`rlrun.spec.consistency`), so each member's spec tells its whole history truly,
and only scheduled settings can be searched this way (`mutation_problems`).
"""

from __future__ import annotations

import copy
import math
import random
from dataclasses import asdict, dataclass
from typing import Any

from rlrun import seeding
from rlrun.search import space as search_space
from rlrun.search.space import Dimension

PBT_STREAM = 103
"""The seeding stream of PBT's draws (`seeding.derive(seed, PBT_STREAM, generation, member)`)."""
QUANTILE = 0.25
RESAMPLE_PROBABILITY = 0.25
FACTORS = (0.8, 1.2)


@dataclass(frozen=True)
class Decision:
    """What member `member` trains in a generation: a continuation of member `source`'s previous
    segment (itself, or a winner it exploits) with `params`; `mutated` names the values explored."""

    member: int
    source: int
    params: dict[str, Any]
    mutated: tuple[str, ...] = ()

    @property
    def exploited(self) -> bool:
        return self.source != self.member


def generations(max_frame: int, interval: int) -> int:
    return math.ceil(max_frame / interval)


def segment_end(generation: int, interval: int, max_frame: int) -> int:
    """The frame budget of a member's segment in `generation` (the last one ends at the budget)."""
    return min((generation + 1) * interval, max_frame)


def exploit_count(population: int, quantile: float) -> int:
    """How many members are replaced each generation: the quantile of the population, rounded up,
    at most half (a member is never both winner and loser)."""
    return min(math.ceil(population * quantile), population // 2)


def initial_params(dimensions: list[Dimension], seed: int, member: int) -> dict[str, Any]:
    rng = random.Random(seeding.derive(seed, PBT_STREAM, 0, member))
    return {d.path: sample(d, rng) for d in dimensions}


def sample(dimension: Dimension, rng: random.Random) -> Any:
    kind, values = dimension.kind, dimension.values
    if kind == "loguniform":
        return math.exp(rng.uniform(math.log(values[0]), math.log(values[1])))
    if kind == "uniform":
        return rng.uniform(values[0], values[1])
    if kind == "randint":
        return rng.randint(values[0], values[1])
    return copy.deepcopy(rng.choice(values))


def mutate(
    dimension: Dimension, value: Any, rng: random.Random, resample_probability: float, factors: tuple[float, ...]
) -> Any:
    """One explored value: resampled, or moved by a factor (clipped to the distribution's range),
    or, for a list of candidates, to a neighbour."""
    if rng.random() < resample_probability:
        return sample(dimension, rng)
    if dimension.kind in search_space.LISTS:
        index = list(dimension.values).index(value) if value in dimension.values else 0
        index = min(max(index + rng.choice((-1, 1)), 0), len(dimension.values) - 1)
        return copy.deepcopy(dimension.values[index])
    low, high = dimension.values
    moved = min(max(value * rng.choice(factors), low), high)
    return round(moved) if dimension.kind == "randint" else moved


def decide(
    dimensions: list[Dimension],
    *,
    seed: int,
    generation: int,
    scores: list[float | None],
    params: list[dict[str, Any]],
    quantile: float = QUANTILE,
    resample_probability: float = RESAMPLE_PROBABILITY,
    factors: tuple[float, ...] = FACTORS,
) -> list[Decision]:
    """Each member's decision for `generation` (>= 1) from the scores its members' previous
    segments recorded (None: failed, ranked last). Ties rank the lower member number lower."""
    population = len(scores)
    ranked = sorted(range(population), key=lambda m: (_rank_key(scores[m]), m))
    count = exploit_count(population, quantile)
    losers, winners = set(ranked[:count]), sorted(ranked[population - count :])
    decisions = []
    for member in range(population):
        if member not in losers:
            decisions.append(Decision(member, member, dict(params[member])))
            continue
        rng = random.Random(seeding.derive(seed, PBT_STREAM, generation, member))
        source = rng.choice(winners)
        explored = {d.path: mutate(d, params[source][d.path], rng, resample_probability, factors) for d in dimensions}
        mutated = tuple(path for path, value in explored.items() if value != params[source][path])
        decisions.append(Decision(member, source, explored, mutated))
    return decisions


def _rank_key(score: float | None) -> float:
    return -math.inf if score is None or math.isnan(score) else score


# ---------------------------------------------------------------------------------------------
# Values that change mid-run, as schedules


def switch_after(schedule: Any, frame: int, value: float) -> Any:
    """A schedule (as a spec document holds it: a number or a step `piecewise`) that is `schedule`
    through frame `frame` and `value` after it: equal to the old one on [0, frame], so it is a
    consistent edit of a run trained to `frame`."""
    if isinstance(schedule, int | float) and not isinstance(schedule, bool):
        points = [[0, schedule]]
    elif isinstance(schedule, dict) and schedule.get("kind") == "piecewise" and schedule.get("interpolation") == "step":
        points = [list(p) for p in schedule["points"] if p[0] <= frame]
    else:
        raise ValueError(
            f"cannot switch a {schedule!r} schedule at frame {frame}: PBT writes numbers and step schedules only"
        )
    if points[-1][1] == value:
        return schedule
    return {"kind": "piecewise", "points": [*points, [frame + 1, value]], "interpolation": "step"}


def value_after(schedule: Any) -> Any:
    """The value a number or step schedule holds after its last point."""
    if isinstance(schedule, dict):
        return schedule["points"][-1][1]
    return schedule


def pin_max_frame(document: Any, max_frame: int) -> Any:
    """A copy of a spec document whose schedules anchored to "max_frame" name the member's whole
    budget instead: each segment of a member is a run with a budget of its own, and the schedules
    must not move with it."""
    if isinstance(document, dict):
        pinned = {key: pin_max_frame(value, max_frame) for key, value in document.items()}
        if pinned.get("kind") == "linear":
            for key in ("from_frame", "to_frame"):
                if pinned.get(key, "max_frame" if key == "to_frame" else 0) == "max_frame":
                    pinned[key] = max_frame
        return pinned
    if isinstance(document, list):
        return [pin_max_frame(item, max_frame) for item in document]
    return document


def mutation_problems(dimensions: list[Dimension], schedules: set[str]) -> list[str]:
    """Why a dimension cannot change mid-run, one line each: PBT changes only scheduled settings
    (`schedules`: their dotted paths), with numbers."""
    problems = []
    for d in dimensions:
        shown = ", ".join(sorted(schedules)) or "none in this spec"
        if d.path not in schedules:
            problems.append(
                f"search.{d.path}: PBT changes values mid-run, and {d.path} cannot change once"
                " training began (it is structural, or a leaf of a schedule); search scheduled"
                f" settings: {shown}"
            )
        elif d.kind in search_space.LISTS and not all(_is_number(v) for v in d.values):
            problems.append(f"search.{d.path}: a schedule takes numbers; list numbers only")
    return problems


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class Options:
    """PBT's own settings, as `rlrun search --scheduler pbt` takes them."""

    population: int
    interval: int
    quantile: float = QUANTILE
    resample_probability: float = RESAMPLE_PROBABILITY
    factors: tuple[float, ...] = FACTORS

    def problems(self, max_frame: int) -> list[str]:
        found = []
        if self.population < 2:
            found.append(f"--population {self.population}: PBT needs at least 2 members")
        if not 0 < self.interval < max_frame:
            found.append(
                f"--interval {self.interval:,} must be above 0 and below the budget ({max_frame:,} frames)"
                "; lower it or raise meta.max_frame"
            )
        if not 0 < self.quantile <= 0.5:
            found.append(f"--quantile {self.quantile}: give a fraction in (0, 0.5], e.g. 0.25")
        if not 0 <= self.resample_probability <= 1:
            found.append(f"--resample {self.resample_probability}: give a probability in [0, 1]")
        if not self.factors or any(not f > 0 for f in self.factors):
            found.append(f"--factors {','.join(map(str, self.factors))}: give positive factors, e.g. 0.8,1.2")
        return found

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
