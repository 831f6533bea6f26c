"""SAC's hyper-parameters (the agent: `rlrun.algorithms.sac`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlrun.spec import AgentConfig, MemorySpec, NetworkSpec, OptimizerSpec
from rlrun.spec.agents.onpolicy import SdeSpec
from rlrun.spec.schedules import Constant


class Config(AgentConfig):
    algorithm: Literal["sac"] = "sac"
    ACTION_SPACES = ("Box",)
    gamma: float = Field(default=0.99, ge=0, le=1)
    """Discount factor."""
    tau: float = Field(default=0.005, gt=0, le=1)
    """Polyak step of the target critics after every gradient step."""
    batch_size: int = Field(default=256, gt=0)
    """Transitions per gradient step."""
    learning_starts: int = Field(default=100, ge=0)
    """Frames of uniformly random actions before learning starts."""
    train_frequency: int = Field(default=1, gt=0)
    """Frames between training rounds."""
    gradient_steps: int = Field(default=1, gt=0)
    """Gradient steps per training round."""
    alpha: float | Literal["auto"] = "auto"
    """Entropy temperature: a fixed number, or "auto" to tune it towards `target_entropy`."""
    alpha_init: float = Field(default=1.0, gt=0)
    """Starting temperature when tuned."""
    target_entropy: float | Literal["auto"] = "auto"
    """Entropy the tuned temperature aims at; "auto" is minus the action dimension."""
    network: NetworkSpec = NetworkSpec(hidden=[256, 256], activation="relu")
    """Actor and each critic."""
    optimizer: OptimizerSpec = OptimizerSpec(lr=Constant(value=3e-4))
    """Used for the actor, the critics and the temperature alike."""
    memory: MemorySpec = MemorySpec(capacity=1_000_000)
    sde: SdeSpec | None = None
    """gSDE (`SdeSpec`), e.g. {"sample_freq": 8}: the actor's noise is its latent features times a
    matrix per env copy, drawn at each training round's first step and every `sample_freq` steps
    (SB3's SAC with `use_sde`: the mean clipped to ±2 before the squash); null: a Gaussian whose
    log std the actor outputs. Structural: its log std, matrices and their clock are in every snapshot."""
    log_std_init: float = -3.0
    """With `sde`: the initial log std of every entry of gSDE's matrix (SB3's SAC default); unused without."""
