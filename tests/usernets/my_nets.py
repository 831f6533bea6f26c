"""Networks of a user's own, for `agent.network.kind = "my_nets:NAME"` (this folder on PYTHONPATH),
and a few that rlrun must refuse, each for its own reason."""

from __future__ import annotations

from typing import Any

import torch
from gymnasium import spaces
from torch import nn


class GoalNet(nn.Module):
    """For DictObs: the goal slot through an embedding, beside the position, then a hidden layer."""

    def __init__(self, observation_space: spaces.Dict, outputs: int, width: int = 32, embedding: int = 4) -> None:
        super().__init__()
        self.goal = nn.Embedding(int(observation_space["goal"].n), embedding)  # type: ignore[attr-defined]
        position = int(observation_space["position"].shape[0])  # type: ignore[index]
        self.body = nn.Sequential(nn.Linear(position + embedding, width), nn.Tanh(), nn.Linear(width, outputs))

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        assert obs["goal"].dtype == torch.int64 and obs["position"].dtype == torch.float32
        out: torch.Tensor = self.body(torch.cat([obs["position"], self.goal(obs["goal"])], dim=-1))
        return out


def small_mlp(observation_space: spaces.Box, outputs: int, width: int = 16) -> nn.Module:
    """A factory function: a module for any Box observation."""
    inputs = int(torch.tensor(observation_space.shape).prod())
    return nn.Sequential(nn.Flatten(), nn.Linear(inputs, width), nn.ReLU(), nn.Linear(width, outputs))


class NotANetwork:
    """Takes the arguments, but is no torch module."""

    def __init__(self, observation_space: Any, outputs: int) -> None:
        self.outputs = outputs


def one_too_many(observation_space: spaces.Box, outputs: int) -> nn.Module:
    """Returns a module with the wrong number of outputs."""
    return small_mlp(observation_space, outputs + 1)


WIDTH = 16
"""Not callable."""
