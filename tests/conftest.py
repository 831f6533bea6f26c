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
