"""TD3+BC's hyper-parameters (the agent: `rlrun.algorithms.td3bc`)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from rlrun.spec import AgentConfig, MemorySpec, NetworkSpec, OptimizerSpec
from rlrun.spec.schedules import Constant


class Config(AgentConfig):
    algorithm: Literal["td3bc"] = "td3bc"
    ACTION_SPACES = ("Box",)
    TAKES_DATA: ClassVar[bool] = True
    NEEDS_DATA: ClassVar[bool] = True
    gamma: float = Field(default=0.99, ge=0, le=1)
    """Discount factor."""
    tau: float = Field(default=0.005, gt=0, le=1)
    """Polyak step of the target actor and critics after each actor step."""
    batch_size: int = Field(default=256, gt=0)
    """Rows per gradient step: offline all from the dataset, online mixed by `data.mixing`."""
    alpha: float = Field(default=2.5, gt=0)
    """The weight of the critic's value against behaviour cloning: the actor's loss is
    −alpha · Q / mean|Q| + (π(s) − a)² (the λ normalisation of Fujimoto & Gu, 2021)."""
    policy_noise: float = Field(default=0.2, ge=0)
    """Standard deviation of the noise added to the target actor's action (actions scaled to [-1, 1])."""
    noise_clip: float = Field(default=0.5, ge=0)
    """That noise is clipped to ±this."""
    policy_freq: int = Field(default=2, gt=0)
    """Gradient steps per actor step (and target update): TD3's delayed policy update."""
    exploration_noise: float = Field(default=0.1, ge=0)
    """Online: standard deviation of the Gaussian noise added to the actor's action (scaled to
    [-1, 1]) while training, and when sampling (`rlrun record --stochastic`)."""
    network: NetworkSpec = NetworkSpec(hidden=[256, 256], activation="relu")
    """Actor and each critic."""
    optimizer: OptimizerSpec = OptimizerSpec(lr=Constant(value=3e-4))
    """Used for the actor and the critics alike."""
    memory: MemorySpec = MemorySpec(capacity=100_000)
    """The online replay memory (after `meta.offline_updates`), in every snapshot with the rest."""
