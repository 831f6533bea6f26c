"""A trained checkpoint as a policy in the user's own Python, as Stable-Baselines3's
`PPO.load(path).predict(obs)`:

    policy = rlrun.load_policy("latest", home="runs")        # the best checkpoint, as `rlrun enjoy`
    env = policy.make_env()                                  # the run's env, as enjoy builds it
    obs, _ = env.reset(seed=0)
    action, state = policy.act(obs)                          # what enjoy would choose

`act` always gives `(action, state)`, as SB3's `predict` does. A policy with a memory
(`agent.network.recurrent`: `policy.recurrent`) takes the state its last step gave and gives the
next one: `action, state = policy.act(obs, state)`, from `state=None` at each episode's start, as
enjoy plays each episode from a fresh memory; a memoryless one gives `state` None.

`act` takes what the run's env gives (`make_env`: `gym.make` of the spec's env with its
wrappers, Atari preprocessing and frame stack, as evaluation and enjoy build it) and chooses
what `rlrun enjoy` chooses there: the observation normalisation statistics of the snapshot are
applied, frozen, and the agent's actor (`rlrun.algorithms.base.Actor`) picks the action.
Preprocessing that lives in the env (Atari's frame skip, max-pooling, resize, grey scale, frame
stack) stays in the env: it needs the emulator, so a policy takes the frames that come out of it.

Nothing is written (the registry is only read); loading imports torch and the algorithm's agent,
not the training loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from rlrun.algorithms.base import Actor
    from rlrun.enjoy import EnjoyTarget
    from rlrun.refs import RunFilter, RunRef


@dataclass
class Policy:
    """A checkpoint's acting policy. `act(observation, state)` gives the action for one observation
    (or a batch of them, with a leading axis) as the env takes it, and the state after it."""

    target: EnjoyTarget
    spec: Any
    """The spec the checkpoint was trained with (`rlrun.spec.Spec`)."""
    agent: Any
    normalizer: Any
    observation_space: Any
    action_space: Any
    seed: int = 0
    """Seeds the generator stochastic actions are drawn from when `act` is given none."""

    def __post_init__(self) -> None:
        import torch

        self.generator = torch.Generator().manual_seed(self.seed)

    @property
    def run_id(self) -> str:
        return self.target.run.id

    @property
    def session(self) -> int:
        return self.target.session.index

    @property
    def checkpoint_frame(self) -> int:
        return self.target.checkpoint.frame

    @property
    def checkpoint_sha256(self) -> str:
        return self.target.checkpoint.sha256

    @property
    def actor(self) -> Actor:
        """How the checkpoint's agent plays (`rlrun.algorithms.base.Actor`)."""
        actor: Actor = self.agent.actor
        return actor

    @property
    def recurrent(self) -> bool:
        """Whether `act` takes and gives a recurrent state (a run with `agent.network.recurrent`)."""
        return self.actor.state_shape is not None

    def act(
        self, observation: Any, state: Any = None, deterministic: bool = True, generator: Any = None
    ) -> tuple[Any, Any]:
        """`(action, next_state)` for `observation` (as the run's env gives it): the greedy action
        unless `deterministic` is false; then drawn from `generator` (a `torch.Generator`; default:
        the policy's own, seeded from `seed`). `state`: None at a fresh episode's start, else what
        the previous step returned for the same batch of episodes; it is never changed. A policy
        without a memory takes no state and gives None (as SB3's `predict`).

        Args:
            observation: One observation as the run's env gives it, or a batch with a leading axis.
            state: The state the previous step returned; None at an episode's start.
            deterministic: Take the greedy action; False draws one.
            generator: A `torch.Generator` to draw from when not `deterministic` (None: the policy's own).

        Returns:
            The action (one, or a batch) and the state after it (None without a memory).

        Raises:
            ValueError: A state given to a policy without a memory, or an observation of another shape.
        """
        if state is not None and not self.recurrent:
            raise ValueError(f"run {self.run_id}'s policy is not recurrent: it takes no state (pass state=None)")
        obs = np.asarray(observation)
        shape = tuple(self.observation_space.shape or ())
        single = obs.shape == shape
        if not single and obs.shape[1:] != shape:
            raise ValueError(
                f"observation of shape {obs.shape}: run {self.run_id}'s env gives {shape}"
                f" (or a batch of them, ({'N', *shape}))"
            )
        batch = obs[None] if single else obs
        seen = batch if self.normalizer is None else self.normalizer.observation(batch)
        drawn_from = None if deterministic else generator or self.generator
        held = self.actor.initial_state(len(batch)) if state is None else state
        actions, after = self.actor.step(seen, held, deterministic=deterministic, generator=drawn_from)
        return (actions[0] if single else actions), after

    def make_env(self, render_mode: str | None = None) -> Any:
        """A fresh copy of the env `act` takes observations from, as `rlrun enjoy` builds it.

        Args:
            render_mode: Gymnasium's render mode (`"human"`, `"rgb_array"`); None: no rendering.
        """
        from rlrun.envs import make_env

        return make_env(self.spec.env, render_mode=render_mode)


def load_policy(
    reference: RunRef | str = "latest",
    filters: RunFilter | None = None,
    *,
    home: Path | str | None = None,
    checkpoint: str | int | None = None,
    seed: int = 0,
    option: str = "checkpoint",
) -> Policy:
    """The acting policy of the checkpoint `reference` names (`rlrun enjoy`'s choice: the best
    session's best checkpoint by default), `checkpoint` as its `@` suffix says it: "best",
    "latest" or a frame count ("5M", 5_000_000). The snapshot is verified against the registry's
    sha256 first; nothing is written, and the global random generators are left as they were.
    `option`: how messages name `checkpoint` (the command line's `--checkpoint`).

    Args:
        reference: The run, as `rlrun enjoy` takes it (latest, a row, an id, prefix or name, a run
            folder; `/sK` for one session).
        filters: Which runs the reference counts among (`RunFilter.of(status="finished")`); None: every run.
        home: The runs home: a folder or an object-store URL (None: $RLRUN_HOME, else ./runs).
        checkpoint: "best", "latest" or a frame count ("5M", 5_000_000); None: the reference's own
            `@` suffix, else the best.
        seed: Seeds the policy's own generator, which `act(..., deterministic=False)` samples from.
        option: How messages name `checkpoint` (the command line's `--checkpoint`).

    Returns:
        The policy: `act(observation, state=None, deterministic=True)` gives `(action, state)`;
        `make_env()` builds the run's env as enjoy does.
    """
    from rlrun.enjoy import load_acting, locate, with_checkpoint

    located = locate(with_checkpoint(reference, checkpoint, option), filters, home=home)
    acting = load_acting(located.root, located.target)
    spaces = acting.env.observation_space, acting.env.action_space
    acting.env.close()
    return Policy(located.target, acting.spec, acting.agent, acting.normalizer, *spaces, seed=seed)


__all__ = ["Policy", "load_policy"]
