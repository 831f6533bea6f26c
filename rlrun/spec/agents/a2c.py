"""A2C's hyper-parameters (the agent: `rlrun.algorithms.a2c`)."""

from __future__ import annotations

from typing import Literal

from rlrun.spec import OptimizerSpec
from rlrun.spec.agents.onpolicy import OnPolicyConfig
from rlrun.spec.schedules import Constant


class Config(OnPolicyConfig):
    algorithm: Literal["a2c"] = "a2c"
    returns: Literal["nstep", "gae"] = "nstep"
    """Advantages from n-step returns, or from GAE with `gae_lambda`."""
    optimizer: OptimizerSpec = OptimizerSpec(name="rmsprop", lr=Constant(value=7e-4), eps=1e-5, grad_clip=0.5)
