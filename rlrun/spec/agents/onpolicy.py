"""What A2C and PPO share: the rollout, the returns and the actor-critic losses' weights; and
gSDE's settings (`SdeSpec`), which SAC takes too."""

from __future__ import annotations

from pydantic import Field, field_validator

from rlrun.spec import AgentConfig, NetworkSpec, OptimizerSpec
from rlrun.spec.schedules import Constant, Schedule
from rlrun.spec.sections import Strict


class SdeSpec(Strict):
    """Generalised state-dependent exploration (gSDE, Raffin et al., 2021; `agent.sde`), as
    Stable-Baselines3's `StateDependentNoiseDistribution`: a continuous action's noise is the
    policy's latent features times an exploration matrix drawn from N(0, std²) with a learned
    log std per (feature, action), held for `sample_freq` steps, so exploration is smooth in time."""

    sample_freq: int = -1
    """Draw a new exploration matrix (one per env copy) every this many steps, and at each rollout's
    start; -1: at each rollout's start only (SB3's `sde_sample_freq`)."""
    full_std: bool = True
    """A log std per latent feature and action dimension; false: one per feature (SB3's `full_std`)."""
    use_expln: bool = False
    """exp(log std) below 0, log1p(log std) + 1 above it, which keeps the std from growing fast
    (SB3's `use_expln`)."""

    @field_validator("sample_freq")
    @classmethod
    def _freq(cls, value: int) -> int:
        if value == 0 or value < -1:
            raise ValueError("must be a positive number of steps, or -1 (a new matrix at each rollout's start only)")
        return value


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
    """Initial log standard deviation of the Gaussian policy (continuous actions); with `sde`, of
    every entry of gSDE's matrix."""
    sde: SdeSpec | None = None
    """gSDE for continuous actions (`SdeSpec`), e.g. {"sample_freq": 4}; null: a Gaussian with a
    state-independent log std. Structural: its log std and matrices are in every snapshot."""
    network: NetworkSpec = NetworkSpec()
    """Actor and critic networks (separate, same shape); with `recurrent`, each its own cell."""
    optimizer: OptimizerSpec = OptimizerSpec()
