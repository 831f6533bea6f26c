"""Networks from the user's own code: `agent.network.kind = "module:factory"`.

The factory (an `nn.Module` class, or a function returning a module) is called as

    factory(observation_space, outputs, **agent.network.kwargs)

once per network the algorithm builds in place of an MLP (PPO and A2C: a policy head with the
policy's logits or Gaussian mean as outputs, and a separate value head with 1; REINFORCE: the policy,
and the value baseline if any; DQN: the Q-network, one output per action, and its target copy).
`observation_space` is the env's own: a Dict or Tuple space as the env declares it, though rlrun
keeps such observations flattened. The module's `forward` takes a batch of observations in that
space, as tensors: Box and MultiBinary values as float32 of shape (batch, *space.shape) (images
unscaled, 0-255), Discrete and MultiDiscrete ones as int64 indices (batch,) and (batch, *nvec.shape),
a Dict as a dict and a Tuple as a tuple of those; it returns a float tensor of shape (batch, outputs).

With a memory (`agent.network.recurrent`, PPO and A2C) the user's network is the torso: it is
called with `outputs` = the memory's `size`, once for the actor and once for the critic, and each
one's output is what its recurrent cell reads (rlrun's LSTM or GRU, then rlrun's linear heads), so
the module itself keeps no state between steps.

It is built on the CPU right after the built-ins would be, from the same seeded torch generator, so
its initial weights are a function of the session seed; its weights (`state_dict`) are saved and
restored with the run, never the module itself, so `enjoy` and `resume` import the module again.
"""

from __future__ import annotations

import difflib
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from rlrun.errors import BadInput
from rlrun.spec import NetworkSpec
from rlrun.spec.user_imports import import_user_module

PROBE_BATCH = 2
"""Observations in the forward pass that checks a user network's output at build time."""


class UserNetwork(nn.Module):
    """The user's module behind the interface the algorithms use: flat float rows in (what rollouts
    and `Fast` hand over), the observations in their own structure out to the module."""

    def __init__(self, module: nn.Module, space: spaces.Space[Any]) -> None:
        super().__init__()
        self.module = module
        self.space = space

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        rows = obs.reshape(len(obs), -1).float()
        out: torch.Tensor = self.module(structured(self.space, rows, flattened=hasattr(self.space, "structure")))
        return out


def build(obs_space: spaces.Space[Any], outputs: int, spec: NetworkSpec) -> UserNetwork:
    """The user's network for `outputs` values, checked with one forward pass; BadInput (one line)
    when the module does not import, lacks the name, is not a module or returns the wrong shape."""
    factory = load_factory(spec.kind)
    space = getattr(obs_space, "structure", obs_space)  # a flattened Dict or Tuple: the env's own space
    where = f"agent.network.kind = {spec.kind!r}"
    try:
        module = factory(space, outputs, **spec.kwargs)
    except Exception as error:  # the user's code: whatever it raises is their input's problem
        raise BadInput(
            f"{where}: calling it with (observation_space, {outputs}, **agent.network.kwargs) raised "
            f"{type(error).__name__}: {error}; it must take the observation space, the number of "
            "outputs and the kwargs"
        ) from None
    if not isinstance(module, nn.Module):
        raise BadInput(
            f"{where} made a {type(module).__name__}, not a torch nn.Module; name an nn.Module class "
            "or a function that returns one"
        )
    network = UserNetwork(module, obs_space)
    _check_output(network, obs_space, outputs, where)
    return network


def load_factory(path: str) -> Any:
    """The object `module:name` names; BadInput when it cannot be imported."""
    module_name, _, name = path.partition(":")
    where = f"agent.network.kind = {path!r}"
    module = import_user_module(module_name, where)
    if not hasattr(module, name):
        candidates = [n for n in vars(module) if not n.startswith("_")]
        close = difflib.get_close_matches(name, candidates, n=1)
        hint = f'did you mean "{module_name}:{close[0]}"' if close else "name a class or function defined there"
        raise BadInput(f"{where}: module {module_name} has no {name}; {hint}")
    factory = getattr(module, name)
    if not callable(factory):
        raise BadInput(
            f"{where}: {name} = {factory!r} is not a torch nn.Module class or a function that returns "
            "one; name one of those"
        )
    return factory


def _check_output(network: UserNetwork, obs_space: spaces.Space[Any], outputs: int, where: str) -> None:
    probe = torch.zeros((PROBE_BATCH, int(np.prod(obs_space.shape or ()))))
    try:
        with torch.no_grad():
            out = network(probe)
    except Exception as error:
        raise BadInput(
            f"{where}: its forward pass on a batch of observations raised {type(error).__name__}: "
            f"{error}; it must take observations as `rlrun.algorithms.user_network` describes"
        ) from None
    shape = tuple(out.shape) if isinstance(out, torch.Tensor) else None
    if shape != (PROBE_BATCH, outputs) or not out.is_floating_point():
        got = f"a tensor of shape {shape} ({out.dtype})" if shape is not None else f"a {type(out).__name__}"
        raise BadInput(
            f"{where}: on a batch of {PROBE_BATCH} observations it returned {got}; it must return "
            f"a float tensor of shape ({PROBE_BATCH}, {outputs}), one row of {outputs} per observation"
        )


def structured(space: spaces.Space[Any], rows: torch.Tensor, *, flattened: bool) -> Any:
    """A batch of observation rows in `space`'s structure. `flattened`: the rows are the space's
    `gymnasium.spaces.flatten` (a Discrete as its one-hot, a Dict's entries in its key order);
    otherwise they are the observations' own values, raveled."""
    space = getattr(space, "structure", space)
    batch = len(rows)
    if isinstance(space, spaces.Dict | spaces.Tuple):
        parts, start = [], 0
        for child in space.spaces.values() if isinstance(space, spaces.Dict) else space.spaces:
            size = spaces.flatdim(child)
            parts.append(structured(child, rows[:, start : start + size], flattened=True))
            start += size
        return dict(zip(space.spaces, parts, strict=True)) if isinstance(space, spaces.Dict) else tuple(parts)
    if isinstance(space, spaces.Discrete):
        index = rows.argmax(dim=-1) if flattened else rows[:, 0].round().long()
        return index + int(space.start)
    if isinstance(space, spaces.MultiDiscrete):
        if not flattened:
            return rows.round().long().reshape(batch, *space.shape)
        sizes = [int(n) for n in space.nvec.ravel()]
        index = torch.stack([one_hot.argmax(dim=-1) for one_hot in rows.split(sizes, dim=-1)], dim=-1)
        return (index + torch.as_tensor(np.asarray(space.start).ravel())).reshape(batch, *space.shape)
    return rows.reshape(batch, *(space.shape or ()))
