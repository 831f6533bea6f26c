"""What A2C and PPO share: the rollout, the returns and the actor-critic losses' weights."""

from __future__ import annotations

from pydantic import Field

from rlrun.spec import AgentConfig, NetworkSpec, OptimizerSpec
from rlrun.spec.schedules import Constant, Schedule


class OnPolicyConfig(AgentConfig):
    ACTION_SPACES = ("Discrete", "Box", "MultiDiscrete", "MultiBinary")
    REMEMBERS = True
    n_steps: int = Field(default=5, gt=0)
    """Steps collected from each env copy before every update (a rollout of n_steps × num_envs)."""
    gamma: float = Field(default=0.99, ge=0, le=1)
    """Discount factor."""
    gae_lambda: float = Field(default=1.0, ge=0, le=1)
    """GAE's lambda: 1 gives n-step returns, lower trades variance for bias."""
    normalize_advantages: bool = False
    """Scale advantages to zero mean and unit variance within each (mini)batch."""
    entropy_coef: Schedule = Constant(value=0.0)
    """Weight of the entropy bonus: a number or a schedule over frames."""
    value_coef: float = Field(default=0.5, ge=0)
    """Weight of the value loss."""
    log_std_init: float = 0.0
    """Initial log standard deviation of the Gaussian policy (continuous actions)."""
    network: NetworkSpec = NetworkSpec()
    """Actor and critic networks (separate, same shape); with `recurrent`, each its own cell."""
    optimizer: OptimizerSpec = OptimizerSpec()
