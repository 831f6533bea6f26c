"""Atari preprocessing (`env.atari`): the DeepMind / Stable-Baselines3 set on top of an ALE env.

Gymnasium's `AtariPreprocessing` does the no-op starts, the frame skip with max-pooling of the last
two frames, the resize and the grey scale (`Preprocessing`: its frame skip played on the emulator
itself, the same frames). Three small wrappers add what it lacks, as SB3's
AtariWrapper has them: a lost life that ends the learner's episode while the game goes on
(`EpisodicLife`; Gymnasium's own option restarts the whole game instead), FIRE at each start
(`FireReset`) and sign-clipped rewards (`ClipReward`). The first and the last are for training
only: an evaluation plays and scores the real game.

Every wrapper keeps its state in plain attributes, so a snapshot captures it with the rest of the
env (`rlrun.envs.state`), the emulator's own state alongside.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rlrun.errors import BadInput
from rlrun.spec import AtariSpec, EnvSpec

ALE_STICKINESS = 0.25
"""ALE's `repeat_action_probability` where an id's registration does not set one (v5: 0.25)."""


def ale_kwargs(spec: EnvSpec, kwargs: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """`gym.make`'s arguments for the ALE env under the preprocessing, and the sticky actions'
    probability (`env.kwargs.repeat_action_probability`, else the id's own). The ALE env steps one
    emulator frame with no stickiness of its own: the preprocessing repeats each action (and
    max-pools the last two frames), and `StickyActions` makes them sticky."""
    if "frameskip" in kwargs:
        raise BadInput(
            "env.kwargs.frameskip: with env.atari, env.atari.frame_skip repeats the actions;"
            " remove env.kwargs.frameskip"
        )
    registered = gym.spec(spec.id).kwargs.get("repeat_action_probability", ALE_STICKINESS)
    stickiness = float(kwargs.get("repeat_action_probability", registered))
    # The preprocessing reads the screen from the emulator itself and drops the observation the ALE
    # env makes at every emulator frame: a grey one is a third of an RGB one's copy.
    screen = {"obs_type": "grayscale"} if spec.atari is not None and spec.atari.grayscale else {}
    return {**screen, **kwargs, "frameskip": 1, "repeat_action_probability": 0.0}, stickiness


def preprocess(env: gym.Env[Any, Any], atari: AtariSpec, stickiness: float, *, training: bool) -> gym.Env[Any, Any]:
    if stickiness > 0:
        env = StickyActions(env, stickiness)
    env = Preprocessing(
        env,
        noop_max=atari.noop_max,
        frame_skip=atari.frame_skip,
        screen_size=atari.screen_size,
        terminal_on_life_loss=False,
        grayscale_obs=atari.grayscale,
        scale_obs=False,
    )
    if training and atari.terminal_on_life_loss:
        env = EpisodicLife(env)
    meanings = env.unwrapped.get_action_meanings()  # type: ignore[attr-defined]
    if atari.fire_reset and len(meanings) >= 3 and meanings[1] == "FIRE":
        env = FireReset(env)
    if training and atari.clip_rewards:
        env = ClipReward(env)
    return env


class Preprocessing(gym.wrappers.AtariPreprocessing):
    """Gymnasium's preprocessing, with its frame skip played straight on the emulator: what each
    emulator frame's `step` through the layers below did (the sticky draw, ALE's act, the game's
    end, an observation the skip drops, the lives), less the layers' calls and the dropped
    observation's copy (a third of an agent step's Python). Taken only over the layers it knows
    (`StickyActions`, Gymnasium's order and passive checks, an ALE env stepping one frame of a
    discrete action) and once the passive checker is done with the first steps: the same
    frames, rewards, ends and infos, and the same attributes in every layer."""

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        plain, sticky = _plain_emulator_below(self.env)
        if not plain:
            return super().step(action)
        ale, base = self.ale, self.env.unwrapped
        action_set, generator = base._action_set, base.np_random  # type: ignore[attr-defined]
        total_reward, terminated, truncated = 0.0, False, False
        for t in range(self.frame_skip):
            if sticky is None:
                played = int(action)
            else:  # StickyActions.step's draw, from the same generator
                if generator.random() >= sticky.probability:
                    sticky.last_action = int(action)
                played = sticky.last_action
            total_reward += 0.0 + ale.act(action_set[played], 1.0)  # ALE env's reward: 0.0 + the frame's
            terminated, truncated = ale.game_over(with_truncation=False), ale.game_truncated()
            self.game_over = terminated
            if self.terminal_on_life_loss:
                new_lives = ale.lives()
                terminated = terminated or new_lives < self.lives
                self.game_over = terminated
                self.lives = new_lives
            if terminated or truncated:
                break
            if t >= self.frame_skip - 2:  # the last two frames, max-pooled
                grab = ale.getScreenGrayscale if self.grayscale_obs else ale.getScreenRGB
                grab(self.obs_buffer[self.frame_skip - 1 - t])
        info = {
            "lives": ale.lives(),
            "episode_frame_number": ale.getEpisodeFrameNumber(),
            "frame_number": ale.getFrameNumber(),
        }
        return self._get_obs(), total_reward, terminated, truncated, info


def _plain_emulator_below(env: gym.Env[Any, Any]) -> tuple[bool, StickyActions | None]:
    """Whether every layer under the preprocessing is one `Preprocessing.step` plays itself, and
    the `StickyActions` layer among them (None: no stickiness)."""
    from ale_py.env import AtariEnv
    from gymnasium.wrappers.common import OrderEnforcing, PassiveEnvChecker

    sticky: StickyActions | None = None
    layer: Any = env
    while isinstance(layer, gym.Wrapper):
        if isinstance(layer, StickyActions) and sticky is None and layer is env:
            sticky = layer
        elif type(layer) is PassiveEnvChecker:
            if not (layer.checked_step and getattr(layer, "checked_data_reuse", True)):
                return False, None  # the first steps are checked through every layer
        elif type(layer) is not OrderEnforcing:
            return False, None
        layer = layer.env
    plain = type(layer) is AtariEnv and layer._frameskip == 1 and not layer.continuous and not layer.sound_obs
    return plain, sticky


class StickyActions(gym.Wrapper[Any, Any, Any, Any]):
    """Sticky actions (Machado et al., 2018), as ALE v5 has them: every emulator frame repeats the
    previous frame's action with this probability instead of taking the new one. Drawn here, from
    the env's generator, rather than inside ALE: ALE's saved state leaves out the previous action,
    so a snapshot could not put its sticky actions back."""

    def __init__(self, env: gym.Env[Any, Any], probability: float) -> None:
        super().__init__(env)
        self.probability = probability
        self.last_action = 0
        """What the emulator was given last (NOOP after a reset, as in ALE)."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        self.last_action = 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        if self.env.unwrapped.np_random.random() >= self.probability:
            self.last_action = int(action)
        return self.env.step(self.last_action)


def _lives(env: gym.Env[Any, Any]) -> int:
    return int(env.unwrapped.ale.lives())  # type: ignore[attr-defined]


class EpisodicLife(gym.Wrapper[Any, Any, Any, Any]):
    """A lost life is a terminal state for the learner, but only a game over restarts the game: the
    reset that follows a lost life is one no-op step from where the game is (Mnih et al., 2015)."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.lives = 0
        self.game_over = True
        """The game itself ended (or was cut off): the next reset is a real one."""

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = bool(terminated or truncated)
        lives = _lives(self.env)
        if 0 < lives < self.lives:  # at 0 some games linger a few frames before their game over
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if self.game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:  # the no-op ended the game
                obs, info = self.env.reset(options=options)
        self.game_over = False
        self.lives = _lives(self.env)
        return obs, info


class FireReset(gym.Wrapper[Any, Any, Any, Any]):
    """Press FIRE (then action 2) at each episode's start: games such as Breakout wait for it."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(options=options)
        return obs, info


class ClipReward(gym.RewardWrapper[Any, Any]):
    """The reward's sign: every game's rewards on one scale, so one learning rate fits them all."""

    def reward(self, reward: Any) -> float:
        return float(np.sign(reward))
