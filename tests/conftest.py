"""Shared test helpers: run `rlrun` in-process (`invoke`, the `cli` fixture) or as a real subprocess
(`rlrun`, `popen`) against a temporary home, and one trained home per test session."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
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


CLASSIC_CONTROL = {"CartPole", "Acrobot", "Pendulum", "MountainCar", "MountainCarContinuous"}


def builtin_for(algorithm: str) -> str:
    """The built-in spec that exercises `algorithm` in tests: its CartPole spec if it has one."""
    from rlrun.spec import builtin_document, builtin_names

    names = [n for n in builtin_names() if builtin_document(n)["agent"]["algorithm"] == algorithm]
    preferred = [n for n in names if n.endswith("_cartpole") and not n.startswith("ddqn")]
    # Otherwise a classic-control env: quick to step, and it renders without OpenGL (MuJoCo's needs it).
    classic = [n for n in names if builtin_document(n)["env"]["id"].split("-")[0] in CLASSIC_CONTROL]
    return (preferred or classic or names)[0]


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


@pytest.fixture(autouse=True)
def _temporary_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs against its own home: in-process commands read RLRUN_HOME, and a database
    URL from the developer's shell never reaches a test."""
    monkeypatch.setenv("RLRUN_HOME", str(home))
    monkeypatch.delenv("RLRUN_DB", raising=False)


@contextlib.contextmanager
def _environment(home: Path | None, env: dict[str, str] | None) -> Iterator[None]:
    saved = dict(os.environ)
    try:
        os.environ.pop("RLRUN_DB", None)
        if home is not None:
            os.environ["RLRUN_HOME"] = str(home)
        os.environ.update(env or {})
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def invoke(home: Path | None, *args: str, env: dict[str, str] | None = None, stdin: str = "") -> Result:
    """`rlrun ARGS` in this process, through the same error handler as the command line
    (`rlrun.cli.run`): its exit code, stdout and stderr. For everything that needs no real process
    or signal; `rlrun` (a subprocess) for the rest."""
    from rlrun.cli import run

    out, err = io.StringIO(), io.StringIO()
    with (_environment(home, env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err),
          _stdin(stdin)):
        code = run(list(args))
    return Result(code, out.getvalue(), err.getvalue())


@contextlib.contextmanager
def _stdin(text: str) -> Iterator[None]:
    saved = sys.stdin
    sys.stdin = io.StringIO(text)
    try:
        yield
    finally:
        sys.stdin = saved


@pytest.fixture
def cli(home: Path) -> Callable[..., Result]:
    """`cli("ls", "--json")`: `rlrun ls --json` in-process against this test's home."""
    return lambda *args, **kwargs: invoke(home, *args, **kwargs)


@pytest.fixture(scope="session")
def trained_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny real training (reinforce_cartpole, TINY) per test session, named `tiny`, for the
    tests that only read a trained home. A test that changes it works on `trained_copy`."""
    home = tmp_path_factory.mktemp("trained") / "runs"
    done = rlrun(home, "train", "reinforce_cartpole", "--name", "tiny", *TINY)
    assert done.code == 0, done.stderr
    return home


@pytest.fixture
def trained_copy(trained_home: Path, tmp_path: Path) -> Path:
    """A private copy of the session's trained home, free to change."""
    copy = tmp_path / "trained"
    shutil.copytree(trained_home, copy)
    return copy
