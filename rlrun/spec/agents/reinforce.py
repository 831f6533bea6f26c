"""REINFORCE's hyper-parameters (the agent: `rlrun.algorithms.reinforce`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlrun.spec import AgentConfig, NetworkSpec, OptimizerSpec
from rlrun.spec.schedules import Constant, Schedule


class Config(AgentConfig):
    algorithm: Literal["reinforce"] = "reinforce"
    ACTION_SPACES = ("Discrete", "MultiDiscrete", "MultiBinary")
    gamma: float = Field(default=0.99, ge=0, le=1)
    """Discount factor of the return."""
    episodes_per_update: int = Field(default=4, gt=0)
    """Finished episodes gathered (over all env copies) before each gradient step."""
    baseline: Literal["none", "mean", "value"] = "value"
    """Subtracted from returns: nothing, the batch mean, or a learned state value."""
    normalize_advantages: bool = True
    """Scale advantages to zero mean and unit variance within each batch."""
    entropy_coef: Schedule = Constant(value=0.0)
    """Weight of the entropy bonus: a number or a schedule over frames."""
    value_coef: float = Field(default=0.5, ge=0)
    """Weight of the value-baseline loss (with `baseline = "value"`)."""
    network: NetworkSpec = NetworkSpec()
    """Policy and value networks (separate, same shape)."""
    optimizer: OptimizerSpec = OptimizerSpec()
