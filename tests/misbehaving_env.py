"""A copy that misbehaves on purpose inside an env worker (tests/test_env_workers.py): a module of its
own, so that a worker's start imports gymnasium and this, not a test module (and torch with it)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import gymnasium as gym


class Misbehaving(gym.Wrapper):  # type: ignore[type-arg]
    """A copy that sleeps for a minute (a hung env) at its step number `sleep_at_step`, or kills its
    worker (-9) at its step number `die_at_step`."""

    def __init__(self, make: Any) -> None:
        super().__init__(make())
        self.sleep_at_step: int | None = None
        self.die_at_step: int | None = None
        self.steps = 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        if self.steps == self.sleep_at_step:
            time.sleep(60)
        if self.steps == self.die_at_step:
            os.kill(os.getpid(), signal.SIGKILL)
        return self.env.step(action)
