"""A spec's search space: the top-level `search` block of a spec, which maps dotted spec paths to
distributions, checked like the rest of the spec. No Optuna here: `rlrun ls` and `rlrun show`
read searches without it, and a bad block is refused before Optuna is imported.

    "search": {
      "agent.optimizer.lr": {"loguniform": [1e-4, 3e-3]},
      "agent.entropy_coef": {"uniform": [0.0, 0.05]},
      "agent.episodes_per_update": {"randint": [2, 8]},
      "agent.network.hidden": {"choice": [[32, 32], [64, 64]]},
      "agent.baseline": {"grid": ["mean", "value"]}
    }

A path names a value of the complete spec (defaults filled in), so a setting the file leaves out
can be searched too; a scheduled value is searched at its leaves (`agent.optimizer.lr.start` of a
linear schedule). Every bound and every choice is checked against the spec's own rules by
validating the spec with that value in place: a bound a field cannot take is refused here, not in
the middle of the search.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any, NamedTuple

from rlrun.errors import SpecError

SEARCH_KEY = "search"
RANGES = ("loguniform", "uniform", "randint")
LISTS = ("choice", "grid")
KINDS = RANGES + LISTS
EXAMPLE = '{"loguniform": [1e-4, 3e-3]}'


class Dimension(NamedTuple):
    path: str
    kind: str
    """loguniform, uniform, randint (both bounds included), choice or grid."""
    values: tuple[Any, ...]
    """(low, high) for a range; the candidates for choice and grid."""

    def to_json(self) -> dict[str, Any]:
        return {self.kind: list(self.values)}


def split(document: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """The spec without its search block, and the block (None when it has none)."""
    base = {key: value for key, value in document.items() if key != SEARCH_KEY}
    return base, document.get(SEARCH_KEY)


def parse(block: Any, base: dict[str, Any]) -> list[Dimension]:
    """The dimensions of a search block over `base` (a complete spec document, as `Spec.to_json`
    gives it); SpecError with one line per problem, each naming `search.<path>` and a fix."""
    if not isinstance(block, dict) or not block:
        raise SpecError(
            [
                f"search = {json.dumps(block)}: not a search space; map dotted spec paths to"
                f' distributions, e.g. {{"agent.optimizer.lr": {EXAMPLE}}}'
            ]
        )
    problems: list[str] = []
    dimensions: list[Dimension] = []
    for path, distribution in block.items():
        where = f"search.{path}"
        problem = _path_problem(path, base)
        if problem is None:
            dimension, problem = _dimension(where, path, distribution)
            if dimension is not None:
                problem = _fit_problem(where, dimension, base)
                dimensions.append(dimension)
        if problem is not None:
            problems.append(f"{where}: {problem}" if not problem.startswith(where) else problem)
    if problems:
        raise SpecError(problems)
    return dimensions


def _path_problem(path: str, base: dict[str, Any]) -> str | None:
    node: Any = base
    walked: list[str] = []
    for key in path.split("."):
        if not isinstance(node, dict):
            shown = ".".join(walked)
            hint = f"; search {shown} itself" if walked else ""
            return f"{shown} is {json.dumps(node)}, not an object with keys{hint}"
        if key not in node:
            from rlrun.spec import did_you_mean

            hint = did_you_mean(path, _paths(base)) or did_you_mean(key, list(node))
            return f"not a setting of this spec;{hint or ' see `rlrun spec schema` for the settings'}"
        walked.append(key)
        node = node[key]
    if walked[0] == SEARCH_KEY or path == "name":
        return "cannot be searched"
    return None


def _paths(node: Any, prefix: str = "") -> list[str]:
    """Every dotted path into a document."""
    if not isinstance(node, dict):
        return []
    found = []
    for key, value in node.items():
        path = f"{prefix}{key}"
        found += [path, *_paths(value, path + ".")]
    return found


def _dimension(where: str, path: str, distribution: Any) -> tuple[Dimension | None, str | None]:
    if not isinstance(distribution, dict) or len(distribution) != 1:
        return None, (
            f"{json.dumps(distribution)} is not a distribution; write one kind and its arguments, e.g. {EXAMPLE}"
        )
    kind, values = next(iter(distribution.items()))
    if kind not in KINDS:
        from rlrun.spec import did_you_mean

        hint = did_you_mean(kind, list(KINDS)) or f" use one of {', '.join(KINDS)}"
        return None, f"unknown distribution {json.dumps(kind)};{hint}"
    shown = f"{where} = {json.dumps(distribution)}"
    if kind in LISTS:
        if not isinstance(values, list) or not values:
            return None, f"{shown}: {kind} takes a non-empty list of values"
        if len({json.dumps(v, sort_keys=True) for v in values}) != len(values):
            return None, f"{shown}: a value is listed twice; list each once"
        return Dimension(path, kind, tuple(values)), None
    if not (isinstance(values, list) and len(values) == 2 and all(_is_number(v) for v in values)):
        return None, f"{shown}: {kind} takes [low, high], two numbers"
    low, high = values
    if not low < high:
        return None, f"{shown}: low must be below high; swap them or use a choice"
    if kind == "loguniform" and low <= 0:
        return None, f"{shown}: loguniform needs low > 0; use uniform for a range that reaches 0"
    if kind == "randint" and not all(isinstance(v, int) for v in values):
        return None, f"{shown}: randint takes whole numbers; use uniform for real ones"
    return Dimension(path, kind, (low, high)), None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _fit_problem(where: str, dimension: Dimension, base: dict[str, Any]) -> str | None:
    """Whether every value the distribution can give fits the field: its bounds and every
    candidate, each validated as the spec would be (a range's values between its bounds fit when
    its bounds do: the spec's bounds are intervals)."""
    from rlrun.spec import validate_spec

    shown = json.dumps(dimension.to_json())
    for value in dimension.values:
        try:
            validate_spec(apply(base, {dimension.path: value}), check_env_id=False)
        except SpecError as error:
            detail = error.problems[0]
            return f"{where} = {shown}: {json.dumps(value)} does not fit ({detail}); narrow the distribution"
    if dimension.kind == "uniform" and _is_integer_field(dimension, base):
        return f"{where} = {shown}: {dimension.path} takes whole numbers; use randint"
    return None


def _is_integer_field(dimension: Dimension, base: dict[str, Any]) -> bool:
    """A field that refuses a value halfway between the bounds is a whole-number one."""
    from rlrun.spec import validate_spec

    low, high = dimension.values
    try:
        validate_spec(apply(base, {dimension.path: (low + high) / 2 + 0.25 * (high - low) / 7}), check_env_id=False)
    except SpecError:
        return True
    return False


def apply(document: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """A copy of `document` with each value of `params` at its dotted path."""
    result = copy.deepcopy(document)
    for path, value in params.items():
        *parents, last = path.split(".")
        node = result
        for key in parents:
            node = node[key]
        node[last] = copy.deepcopy(value)
    return result


def is_grid(dimensions: list[Dimension]) -> bool:
    return all(d.kind == "grid" for d in dimensions)


def grid_size(dimensions: list[Dimension]) -> int:
    return math.prod(len(d.values) for d in dimensions)


def load(space_json: str) -> list[Dimension]:
    """The dimensions stored with a search (checked when it was created)."""
    dimensions = []
    for path, distribution in json.loads(space_json).items():
        ((kind, values),) = distribution.items()
        dimensions.append(Dimension(path, kind, tuple(values)))
    return dimensions
