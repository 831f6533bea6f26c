"""IQL's hyper-parameters (the agent: `rlrun.algorithms.iql`)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from rlrun.spec import AgentConfig, MemorySpec, NetworkSpec, OptimizerSpec
from rlrun.spec.schedules import Constant


class Config(AgentConfig):
    algorithm: Literal["iql"] = "iql"
    ACTION_SPACES = ("Box",)
    TAKES_DATA: ClassVar[bool] = True
    NEEDS_DATA: ClassVar[bool] = True
    gamma: float = Field(default=0.99, ge=0, le=1)
    """Discount factor."""
    tau: float = Field(default=0.005, gt=0, le=1)
    """Polyak step of the target critics after every gradient step."""
    batch_size: int = Field(default=256, gt=0)
    """Rows per gradient step: offline all from the dataset, online mixed by `data.mixing`."""
    expectile: float = Field(default=0.7, gt=0, lt=1)
    """The expectile the value network fits to the target critics' values (CORL's `iql_tau`):
    0.5 is the mean, towards 1 the best action's value."""
    beta: float = Field(default=3.0, ge=0)
    """Inverse temperature of the advantage weights exp(beta · A) of the actor's loss."""
    exp_adv_max: float = Field(default=100.0, gt=0)
    """Those weights are clipped to at most this."""
    actor: Literal["gaussian", "deterministic"] = "gaussian"
    """"gaussian": a Gaussian around the tanh of the network's output, its log std one learned
    number per action dimension, trained by the advantage-weighted log-likelihood of the data's
    actions; "deterministic": the tanh alone, trained by the weighted squared error (CORL's
    `iql_deterministic`). The mean plays when evaluating either; online, the Gaussian explores by
    its samples, the deterministic actor not at all."""
    network: NetworkSpec = NetworkSpec(hidden=[256, 256], activation="relu")
    """Actor, value network and each critic."""
    optimizer: OptimizerSpec = OptimizerSpec(lr=Constant(value=3e-4))
    """Used for the actor, the value network and the critics alike."""
    memory: MemorySpec = MemorySpec(capacity=100_000)
    """The online replay memory (after `meta.offline_updates`), in every snapshot with the rest."""
