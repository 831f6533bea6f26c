"""Scoring a policy on a separate env whose randomness is its own, inline or beside training.

An evaluation at frame F is a function of the policy's weights at F, the normalisation statistics
at F, the session seed, F, and (for wrappers of the user's that keep state) the evaluations before
it. `Evaluator` runs them in that order, either at once in the training loop or on one background
thread on a copy of the agent taken at F; either way the results are the same, bit for bit, and
the loop records them in frame order (`rlrun.session.loop`). An evaluation due a video plays its
first episode again for it, in the same place, after it (`rlrun.session.eval_video`).
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlrun import seeding, testhooks
from rlrun.algorithms import build_agent
from rlrun.algorithms.base import Actor, Agent
from rlrun.envs import make_env
from rlrun.envs.normalize import Normalizer, make_normalizer
from rlrun.envs.state import generator_state, make_generator, restore_wrappers_state, wrappers_state
from rlrun.session import eval_video
from rlrun.spec import Spec


@dataclass(frozen=True)
class Evaluation:
    frame: int
    returns: list[float]
    lengths: list[int]
    truncated: list[bool] = field(default_factory=list)
    """Per episode: cut by `meta.eval_max_steps` before it ended (its return so far counts)."""

    @property
    def mean(self) -> float:
        return float(np.mean(self.returns))

    @property
    def std(self) -> float:
        return float(np.std(self.returns))

    def summary(self) -> dict[str, Any]:
        return {
            "frame": self.frame,
            "mean": self.mean,
            "std": self.std,
            "min": float(np.min(self.returns)),
            "max": float(np.max(self.returns)),
            "episodes": len(self.returns),
        }

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Played:
    returns: list[float]
    lengths: list[int]
    truncated: list[bool]


@dataclass(frozen=True)
class EvalEnvState:
    """What the evaluation env carries from one evaluation to the next (snapshot meta's parts)."""

    generator: Any
    wrappers: list[Any] | None


@dataclass(frozen=True)
class Outcome:
    evaluation: Evaluation
    env_after: EvalEnvState
    """The evaluation env's state once this evaluation ended: what a snapshot at its frame holds."""
    video: eval_video.Video | None = None
    """Its video (`meta.eval_video`), when it was due one: the file, or why there is none."""


def evaluate(
    agent: Agent,
    env: gym.Env[Any, Any],
    *,
    seed: int,
    frame: int,
    episodes: int,
    deterministic: bool = True,
    epsilon: float = 0.0,
    max_steps: int | None = None,
    normalizer: Normalizer | None = None,
) -> Evaluation:
    """Run `episodes` episodes. Episode k at frame f is seeded from (seed, f, k) alone, so an
    evaluation neither depends on nor disturbs any other random stream (nor the training env's
    normalisation statistics, which it reads frozen)."""
    seeds = episode_seeds(seed, frame, episodes)
    actor = agent.actor
    played = play(
        actor, env, seeds, deterministic=deterministic, epsilon=epsilon, max_steps=max_steps, normalizer=normalizer
    )
    return Evaluation(frame=frame, returns=played.returns, lengths=played.lengths, truncated=played.truncated)


def episode_seeds(seed: int, frame: int, episodes: int) -> list[int]:
    """The seeds of the evaluation at `frame`'s episodes, from (seed, frame, k) alone."""
    return [seeding.derive(seed, seeding.EVAL, frame, k) for k in range(episodes)]


def play(
    actor: Actor,
    env: gym.Env[Any, Any],
    seeds: list[int],
    *,
    deterministic: bool,
    epsilon: float = 0.0,
    max_steps: int | None = None,
    on_frame: Callable[[Any], None] | None = None,
    normalizer: Normalizer | None = None,
) -> Played:
    """One episode per seed, played by `actor`; the env, any action sampling and the ε-random
    actions are seeded from it. `on_frame` gets the env's render after every step. The actor sees
    observations through `normalizer`, frozen (never updated here); returns are the env's own
    rewards. An episode still running after `max_steps` steps is cut there."""
    returns, lengths, cut = [], [], []
    random_actions = copy.deepcopy(env.action_space)  # the env's own space's generator stays untouched
    remembers = actor.state_shape is not None
    for episode_seed in seeds:
        generator = None if deterministic else torch.Generator().manual_seed(episode_seed)
        explore = np.random.default_rng(seeding.derive(episode_seed, seeding.EVAL_EXPLORATION))
        random_actions.seed(seeding.derive(episode_seed, seeding.EVAL_EXPLORATION, 1))
        obs, _ = env.reset(seed=episode_seed)
        state = actor.initial_state(1)  # each episode from a fresh memory
        total, length, done, truncated = 0.0, 0, False, False
        while not done:
            explored = epsilon > 0 and explore.random() < epsilon
            if remembers or not explored:  # a memory reads every observation, whichever action is taken
                chosen, state = actor.step(
                    _seen(obs, normalizer), state, deterministic=deterministic, generator=generator
                )
            action = random_actions.sample() if explored else chosen[0]
            obs, reward, terminated, ended_by_limit, _ = env.step(action)
            if on_frame is not None:
                on_frame(env.render())
            total += float(reward)
            length += 1
            truncated = max_steps is not None and length >= max_steps and not (terminated or ended_by_limit)
            done = bool(terminated or ended_by_limit or truncated)
        returns.append(total)
        lengths.append(length)
        cut.append(truncated)
    return Played(returns, lengths, cut)


def _seen(obs: Any, normalizer: Normalizer | None) -> np.ndarray:
    """One observation as the agent reads it: a batch of one, normalised (frozen) if the run is."""
    batch = np.asarray(obs)[None]
    return batch if normalizer is None else normalizer.observation(batch)


def acting_state(agent_state: dict[str, Any]) -> dict[str, Any]:
    """An agent's state to act from: the replay memory left out (acting never reads it)."""
    if "memory" not in agent_state:
        return agent_state
    return {**agent_state, "memory": {"included": False}, "logs": {}}


class Evaluator:
    """The session's evaluations, in frame order: at once (`overlap` false) or on one background
    thread, each on a copy of the agent and normalisation statistics taken when it is submitted.

    The copy is an agent of the same spec loaded with the training agent's state (its replay
    memory aside), built once; so a second evaluation waits for the first before it takes the
    copy's place. Nothing here touches the training agent, env or random generators after
    `submit` returns. `videos`: where the video of the evaluation at a frame goes (None: no videos)."""

    def __init__(
        self,
        spec: Spec,
        obs_space: Any,
        action_space: Any,
        seed: int,
        device: str,
        videos: Callable[[int], Path] | None = None,
    ) -> None:
        self.spec, self.seed = spec, seed
        self.env = make_env(spec.env)
        self.recorder = eval_video.Recorder(spec, videos) if videos is not None and spec.meta.eval_video else None
        self.overlap = spec.meta.eval_overlap
        self.done: deque[Outcome] = deque()
        self.running: Future[Outcome] | None = None
        self.running_frame: int | None = None
        self.waited = 0.0
        """Seconds the training loop spent waiting on evaluations (all of them, when inline)."""
        self.copy: Agent | None = None
        self.copy_normalizer: Normalizer | None = None
        self.thread: ThreadPoolExecutor | None = None
        if self.overlap:
            with torch.random.fork_rng(devices=[]):  # building reseeds torch's generator: training's is kept
                self.copy = build_agent(spec, obs_space, action_space, seed, device)
            self.copy_normalizer = make_normalizer(spec, obs_space)
            self.thread = ThreadPoolExecutor(1, thread_name_prefix="rlrun-eval")

    # -- the evaluation env's state, carried by snapshots ---------------------------------------

    def env_state(self) -> EvalEnvState:
        return EvalEnvState(
            generator_state(getattr(self.env.unwrapped, "_np_random", None)),
            wrappers_state(self.env) if self.spec.env.wrappers else None,
        )

    def restore_env(self, state: EvalEnvState) -> None:
        if state.wrappers is not None:
            restore_wrappers_state(self.env, state.wrappers)
        if state.generator is not None:
            self.env.unwrapped._np_random = make_generator(state.generator)

    # -- running --------------------------------------------------------------------------------

    def submit(self, frame: int, agent: Agent, normalizer: Normalizer | None, *, number: int) -> None:
        """Evaluate the policy as it is at `frame`; `number`: the evaluation's place among the
        session's (0: its first), which says whether it gets a video."""
        import time

        video = self.recorder is not None and eval_video.due(number, self.spec.meta.eval_video)
        if self.thread is None:
            started = time.monotonic()
            self.done.append(self._run(frame, agent, normalizer, video))
            self.waited += time.monotonic() - started
            return
        self._finish_running()
        started = time.monotonic()
        assert self.copy is not None
        self.copy.load_state_dict(acting_state(agent.state_dict()))
        if normalizer is not None:
            assert self.copy_normalizer is not None
            self.copy_normalizer.load_state_dict(copy.deepcopy(normalizer.state_dict()))
        self.waited += time.monotonic() - started
        self.running_frame = frame
        self.running = self.thread.submit(
            self._run, frame, self.copy, self.copy_normalizer if normalizer is not None else None, video
        )

    def unrecorded(self) -> int:
        """Evaluations submitted that the loop has not taken yet (`finished`)."""
        return len(self.done) + (self.running is not None)

    def _run(self, frame: int, agent: Agent, normalizer: Normalizer | None, video: bool = False) -> Outcome:
        testhooks.slow_evaluation()
        # the first episode starts from the wrappers' state as it is now: its replay must too
        wrappers = wrappers_state(self.env) if video and self.spec.env.wrappers else None
        evaluation = evaluate(
            agent,
            self.env,
            seed=self.seed,
            frame=frame,
            episodes=self.spec.meta.num_eval_episodes,
            deterministic=self.spec.meta.eval_deterministic,
            epsilon=self.spec.eval_epsilon,
            max_steps=self.spec.eval_max_steps,
            normalizer=normalizer,
        )
        after = self.env_state()
        recorded = None
        if video and self.recorder is not None:
            first = episode_seeds(self.seed, frame, 1)[0]
            recorded = self.recorder.record(
                play, frame, first, agent.actor, normalizer, wrappers, evaluation.returns[0]
            )
        return Outcome(evaluation, after, recorded)

    def _finish_running(self) -> None:
        if self.running is None:
            return
        import time

        started = time.monotonic()
        outcome = self.running.result()
        self.waited += time.monotonic() - started
        self.running, self.running_frame = None, None
        self.done.append(outcome)

    def pending_frame(self) -> int | None:
        """The frame of the evaluation still running (None: none is)."""
        return self.running_frame

    def finished(self, wait: bool = False) -> list[Outcome]:
        """Evaluations ended since the last call, oldest first; `wait`: every one submitted."""
        if self.running is not None and (wait or self.running.done()):
            self._finish_running()
        ended = list(self.done)
        self.done.clear()
        return ended

    def close(self) -> None:
        if self.thread is not None:
            self.thread.shutdown(wait=True, cancel_futures=True)
        self.env.close()
        if self.recorder is not None:
            self.recorder.close()
