"""Behaviour cloning's hyper-parameters (the agent: `rlrun.algorithms.bc`)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from rlrun.spec import AgentConfig, NetworkSpec, OptimizerSpec


class Config(AgentConfig):
    algorithm: Literal["bc"] = "bc"
    ACTION_SPACES = ("Discrete", "Box")
    TAKES_DATA: ClassVar[bool] = True
    NEEDS_DATA: ClassVar[bool] = True
    batch_size: int = Field(default=256, gt=0)
    """Dataset rows per gradient step, drawn uniformly with the agent's own generator."""
    network: NetworkSpec = NetworkSpec()
    """Policy network: logits over the actions (discrete), or the tanh-squashed action (continuous)."""
    optimizer: OptimizerSpec = OptimizerSpec()
