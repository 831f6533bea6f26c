"""Which observation and action spaces rlrun trains on, said once: a spec whose env has another is
refused before anything is written, naming the space."""

from __future__ import annotations

from typing import Any

from gymnasium import spaces

from rlrun.errors import BadInput

TRAINABLE: tuple[type[spaces.Space[Any]], ...] = (spaces.Box, spaces.Discrete)
"""The spaces the algorithms take, as observations and as actions."""


def check_spaces(env_id: str, observation_space: spaces.Space[Any], action_space: spaces.Space[Any]) -> None:
    """BadInput naming the first space of the env that rlrun cannot train on."""
    fixes = {"observation": "wrap the env in gymnasium.wrappers.FlattenObservation",
             "action": "give the env one (a gymnasium.ActionWrapper that maps it onto yours)"}
    for which, space in (("observation", observation_space), ("action", action_space)):
        if not isinstance(space, TRAINABLE):
            supported = " and ".join(kind.__name__ for kind in TRAINABLE)
            raise BadInput(f"{env_id} has a {type(space).__name__} {which} space ({space}); rlrun trains on"
                           f" {supported} {which}s: {fixes[which]}")
