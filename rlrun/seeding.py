"""Every random stream of a session derives from its seed, each through its own path.

Streams are independent by construction (NumPy's SeedSequence), so the environment, the agent's
sampling and evaluation never share randomness: adding an evaluation cannot shift training.
"""

from __future__ import annotations

import numpy as np

TORCH_INIT = 1
"""Global torch generator: network initialisation."""
AGENT = 2
"""The agent's own sampling generator."""
ENV = 3
"""Training env resets (each copy of a vector env gets its own seed from Gymnasium)."""
ACTION_SPACE = 4
"""Every space's generator (`action_space.sample()` for exploration), one path per space."""
PYTHON_NUMPY = 5
"""Python's `random` and NumPy's legacy global generator, for any library that uses them."""
EVAL = 6
"""Evaluation episodes: one seed per (frame, episode)."""
ENJOY = 7
"""`rlrun enjoy` episodes: one seed per episode."""
EVAL_EXPLORATION = 8
"""Evaluation's random actions (`meta.eval_epsilon`), below an evaluation episode's seed."""


def derive(seed: int, stream: int, *path: int) -> int:
    """A 31-bit seed for `stream` (and an optional path below it) of the session seeded `seed`."""
    entropy = [seed, stream, *path]
    return int(np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint32)[0] >> 1)


def enjoy_episode_seeds(seed: int, episodes: int) -> list[int]:
    """The seeds of the episodes `rlrun enjoy --seed SEED` plays (and `rlrun record` records)."""
    return [derive(seed, ENJOY, k) for k in range(episodes)]
