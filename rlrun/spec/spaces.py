"""Which Gymnasium spaces rlrun trains on: the one place that says so.

Observations: arrays (Box, Discrete, MultiDiscrete, MultiBinary) reach the networks as they are;
structured ones (Dict, Tuple) are flattened into one Box, as `gymnasium.spaces.flatten` does it
(`rlrun.envs.spaces` wraps the env); anything else is refused. Actions: each algorithm's `Config`
names the action spaces it can act in (`ACTION_SPACES`); anything else is refused, naming the
algorithms that can. Spaces are told apart by class name, so this module imports neither torch nor
Gymnasium.
"""

from __future__ import annotations

from typing import Any, Literal

from rlrun.errors import BadInput
from rlrun.spec.agents import algorithm_names, config_class

ARRAY_OBSERVATIONS = ("Box", "Discrete", "MultiDiscrete", "MultiBinary")
STRUCTURED_OBSERVATIONS = ("Dict", "Tuple")
ACTIONS = ("Box", "Discrete", "MultiDiscrete", "MultiBinary")
"""Every action space some algorithm acts in."""


def kind(space: Any) -> str:
    """The Gymnasium space class a space is (a subclass counts as its base), else its own class name."""
    names = [cls.__name__ for cls in type(space).__mro__]
    known = (*ARRAY_OBSERVATIONS, *STRUCTURED_OBSERVATIONS)
    return next((name for name in names if name in known), type(space).__name__)


def observation_handling(space: Any, env_id: str) -> Literal["as is", "flattened"]:
    """How the networks get `env_id`'s observations; BadInput for a space they cannot take."""
    what = kind(space)
    if what in ARRAY_OBSERVATIONS:
        return "as is"
    if what in STRUCTURED_OBSERVATIONS and getattr(space, "is_np_flattenable", False):
        return "flattened"
    raise BadInput(
        f"{env_id} observes {space}, which rlrun cannot give a network; it takes "
        f"{_either(ARRAY_OBSERVATIONS + STRUCTURED_OBSERVATIONS)} observations (of a fixed size): "
        "wrap the env so it observes one of those"
    )


def check_action_space(algorithm: str, space: Any, env_id: str) -> None:
    """BadInput unless `algorithm` can act in `space` (`env_id`'s), naming the algorithms that can."""
    what, takes = kind(space), config_class(algorithm).ACTION_SPACES
    if what in takes:
        return
    # An algorithm that learns only from a dataset is no way out for a spec that has none.
    needs_data = getattr(config_class(algorithm), "NEEDS_DATA", False)
    able = [
        name
        for name in algorithm_names()
        if what in config_class(name).ACTION_SPACES and getattr(config_class(name), "NEEDS_DATA", False) <= needs_data
    ]
    instead = f"use {_either(able)}" if able else f"wrap the env so it acts in a {_either(ACTIONS)} space"
    raise BadInput(
        f"{algorithm} cannot train on {env_id}: it acts in {_either(takes)} action spaces, not {space}; {instead}"
    )


def _either(names: list[str] | tuple[str, ...]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
