"""Shared test helpers: run the real `rlrun` command in a subprocess against a temporary home."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# A tiny but real training: CartPole, 3k frames, evaluations and snapshots every 1k.
TINY = ["--frames", "3000", "--set", "meta.eval_frequency=1000", "--set", "meta.checkpoint_frequency=1000",
        "--set", "meta.num_eval_episodes=2", "--set", "meta.log_frequency=1000"]


# Smaller networks, batches and memories for the algorithms whose built-in specs are expensive
# per frame: the code paths (and what a snapshot must hold) are the same, the tests much faster.
FAST = {
    "dqn": ["agent.learning_starts=500", "agent.train_frequency=16", "agent.gradient_steps=2", "agent.batch_size=32",
            "agent.network.hidden=[64, 64]", "agent.memory.capacity=20000"],
    "sac": ["agent.learning_starts=200", "agent.train_frequency=4", "agent.batch_size=32",
            "agent.network.hidden=[32, 32]", "agent.memory.capacity=20000"],
    "ppo": ["agent.n_steps=64", "agent.batch_size=64", "agent.n_epochs=2"],
}


def builtin_for(algorithm: str) -> str:
    """The built-in spec that exercises `algorithm` in tests: its CartPole spec if it has one."""
    from rlrun.spec import builtin_document, builtin_names

    names = [n for n in builtin_names() if builtin_document(n)["agent"]["algorithm"] == algorithm]
    return next((n for n in names if n.endswith("_cartpole") and not n.startswith("ddqn")), names[0])


def fast(spec: str) -> list[str]:
    from rlrun.spec import builtin_document

    return [arg for edit in FAST.get(builtin_document(spec)["agent"]["algorithm"], []) for arg in ("--set", edit)]


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def cli_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RLRUN_HOME", "RLRUN_DB", "DISPLAY", "WAYLAND_DISPLAY")}
    env["RLRUN_HOME"] = str(home)
    return env


def rlrun(home: Path, *args: str, timeout: float = 300) -> Result:
    completed = subprocess.run([sys.executable, "-m", "rlrun", *args], env=cli_env(home), capture_output=True,
                               text=True, timeout=timeout)
    return Result(completed.returncode, completed.stdout, completed.stderr)


def popen(home: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "rlrun", *args], env=cli_env(home), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "runs"
