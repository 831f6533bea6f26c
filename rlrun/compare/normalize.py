"""Scores on one scale across tasks: `--normalize none|minmax|human`.

`human`: Atari's human-normalised score, (score - random) / (human - random), with the published
per-game random-agent and human scores. `minmax`: (score - low) / (high - low) over the task's known
range of episode returns. A task without a reference keeps its raw score, and the comparison says so.

Sources. The Atari scores are the random and human scores of the Atari 100k benchmark's 26 games
as rliable ships them (Agarwal et al., "Deep Reinforcement Learning at the Edge of the Statistical
Precipice", NeurIPS 2021, github.com/google-research/rliable, `atari_100k` data; the RL Zoo copies
them in `rl_zoo3/plots/score_normalization.py`), which come from Mnih et al., "Human-level control
through deep reinforcement learning", Nature 2015, and Kaiser et al., "Model-Based Reinforcement
Learning for Atari", ICLR 2020. The min-max ranges are the envs' own bounds: reward per step times
the time limit of Gymnasium's registration (CartPole-v1: +1 for each of at most 500 steps;
Pendulum-v1: a step's reward lies in [-(pi^2 + 0.1 * 8^2 + 0.001 * 2^2), 0] for 200 steps).
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

NORMALIZATIONS = ("none", "minmax", "human")

# The score tables below keep the published layout, several games a line (fmt: skip): one entry a
# line would make 60 lines of numbers that read worse than the papers' tables they are copied from.
ATARI_RANDOM = {
    "Alien": 227.8, "Amidar": 5.8, "Assault": 222.4, "Asterix": 210.0, "BankHeist": 14.2, "BattleZone": 2360.0,
    "Boxing": 0.1, "Breakout": 1.7, "ChopperCommand": 811.0, "CrazyClimber": 10780.5, "DemonAttack": 152.1,
    "Freeway": 0.0, "Frostbite": 65.2, "Gopher": 257.6, "Hero": 1027.0, "Jamesbond": 29.0, "Kangaroo": 52.0,
    "Krull": 1598.0, "KungFuMaster": 258.5, "MsPacman": 307.3, "Pong": -20.7, "PrivateEye": 24.9,
    "Qbert": 163.9, "RoadRunner": 11.5, "Seaquest": 68.4, "UpNDown": 533.4,
}  # fmt: skip
ATARI_HUMAN = {
    "Alien": 7127.7, "Amidar": 1719.5, "Assault": 742.0, "Asterix": 8503.3, "BankHeist": 753.1,
    "BattleZone": 37187.5, "Boxing": 12.1, "Breakout": 30.5, "ChopperCommand": 7387.8, "CrazyClimber": 35829.4,
    "DemonAttack": 1971.0, "Freeway": 29.6, "Frostbite": 4334.7, "Gopher": 2412.5, "Hero": 30826.4,
    "Jamesbond": 302.8, "Kangaroo": 3035.0, "Krull": 2665.5, "KungFuMaster": 22736.3, "MsPacman": 6951.6,
    "Pong": 14.6, "PrivateEye": 69571.3, "Qbert": 13455.0, "RoadRunner": 7845.0, "Seaquest": 42054.7,
    "UpNDown": 11693.2,
}  # fmt: skip

_PENDULUM_STEP = math.pi**2 + 0.1 * 8**2 + 0.001 * 2**2
KNOWN_RANGES = {
    "CartPole-v0": (0.0, 200.0), "CartPole-v1": (0.0, 500.0), "Acrobot-v1": (-500.0, 0.0),
    "MountainCar-v0": (-200.0, 0.0), "Pendulum-v1": (-200 * _PENDULUM_STEP, 0.0),
}  # fmt: skip
"""Each env's range of episode returns under its registered time limit."""

_ATARI_ID = re.compile(r"(?:ALE/)?(?P<game>[A-Za-z]+?)(?:NoFrameskip)?-v[0-9]+")


class Scale(NamedTuple):
    """How one task's scores are normalised: (score - low) / (high - low); None when they stay raw."""

    low: float
    high: float

    def apply(self, score: float) -> float:
        return (score - self.low) / (self.high - self.low)


def atari_game(env_id: str) -> str | None:
    """The game of an Atari env id (`ALE/Pong-v5`, `PongNoFrameskip-v4`: Pong), None for another env."""
    match = _ATARI_ID.fullmatch(env_id)
    if match is None:
        return None
    game = match["game"]
    return next((name for name in ATARI_HUMAN if name.lower() == game.lower()), None)


def scale(env_id: str, normalize: str) -> Scale | None:
    """The scale `normalize` gives `env_id`'s scores, None when it has none (raw scores)."""
    if normalize == "human":
        game = atari_game(env_id)
        return None if game is None else Scale(ATARI_RANDOM[game], ATARI_HUMAN[game])
    if normalize == "minmax":
        known = KNOWN_RANGES.get(env_id)
        return None if known is None else Scale(*known)
    return None


def missing_reason(env_id: str, normalize: str) -> str:
    """Why `env_id` keeps its raw scores under `normalize`, for the comparison's notes."""
    if normalize == "human":
        return (
            f"{env_id} has no published human and random scores here (Atari's 26 games of the Atari 100k"
            " table only); its raw scores are used"
        )
    return f"{env_id} has no known range of returns; its raw scores are used"
