"""PPO's hyper-parameters (the agent: `rlrun.algorithms.ppo`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from rlrun.spec import OptimizerSpec
from rlrun.spec.agents.onpolicy import OnPolicyConfig
from rlrun.spec.problems import KeyProblem
from rlrun.spec.schedules import Constant, Schedule


class Config(OnPolicyConfig):
    algorithm: Literal["ppo"] = "ppo"
    n_steps: int = Field(default=2048, gt=0)
    """Steps collected from each env copy before every update."""
    gae_lambda: float = Field(default=0.95, ge=0, le=1)
    """GAE's lambda."""
    n_epochs: int = Field(default=10, gt=0)
    """Passes over each rollout."""
    batch_size: int = Field(default=64, gt=0)
    """Minibatch size in transitions (the rollout is split into rollout / batch_size minibatches per
    epoch). With a memory (`network.recurrent`) minibatches are whole env copies' sequences, so it
    must be a multiple of n_steps: batch_size / n_steps env copies per minibatch; or, with
    `sequence_length`, a multiple of it: batch_size / sequence_length chunks per minibatch."""
    sequence_length: int | None = Field(default=None, gt=0)
    """With a memory: cut each env copy's rollout into chunks of this many steps (the last one
    padded when it does not divide n_steps), each read from the memory at its start, and draw
    minibatches of chunks from any env copies, as sb3-contrib's RecurrentPPO does. None: whole
    rollouts of one env copy."""
    clip_range: Schedule = Constant(value=0.2)
    """Ratio clipping of the surrogate objective: a number or a schedule over frames."""
    clip_range_vf: float | None = Field(default=None, gt=0)
    """Clip each value update to this distance from the value at collection (none when null)."""
    normalize_advantages: bool = True
    optimizer: OptimizerSpec = OptimizerSpec(lr=Constant(value=3e-4), grad_clip=0.5)

    @model_validator(mode="after")
    def _whole_sequences(self) -> Config:
        if self.sequence_length is not None:
            return self._chunks()
        if self.network.recurrent is not None and self.batch_size % self.n_steps:
            fits = max(1, self.batch_size // self.n_steps) * self.n_steps
            raise KeyProblem(
                "batch_size",
                f"is not a multiple of {{n_steps}} ({self.n_steps}); with a memory each minibatch is whole"
                f" sequences of n_steps; use batch_size {fits} ({fits // self.n_steps} env copies per minibatch)",
            )
        return self

    def _chunks(self) -> Config:
        length = self.sequence_length
        assert length is not None
        if self.network.recurrent is None:
            raise KeyProblem(
                "sequence_length",
                "cuts sequences for a memory, and the network has none; set {network.recurrent}"
                ' (e.g. {"cell": "lstm", "size": 64}) or remove sequence_length',
            )
        if self.batch_size % length:
            fits = max(1, self.batch_size // length) * length
            raise KeyProblem(
                "batch_size",
                f"is not a multiple of {{sequence_length}} ({length}); each minibatch is whole chunks;"
                f" use batch_size {fits} ({fits // length} chunks per minibatch)",
            )
        return self
