"""Fixtures and hooks only (the helpers live in tests/helpers.py): every test's own home, the `cli`
fixture (`rlrun` in-process against it), one trained home per test session, and the workers."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import TINY, Result, invoke, rlrun

UNIT = Path(__file__).resolve().parent / "unit"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which turns "auto" into a number
def pytest_cmdline_main(config: pytest.Config) -> None:
    """With pytest-xdist installed, the suite runs on one worker per core, at most four (every test
    that trains starts its own processes), unless `-n` says otherwise; tests marked xdist_group
    (tests/test_ray.py's share one Ray cluster) stay on one worker (loadgroup). The unit lane alone
    (`pytest tests/unit`) runs in this process: it takes seconds, less than starting workers."""
    if not config.pluginmanager.has_plugin("xdist") or hasattr(config, "workerinput"):
        return
    option = config.option
    if option.numprocesses is None and not _unit_lane_only(config):
        option.numprocesses = "auto"
        option.maxprocesses = option.maxprocesses or 4
    if option.numprocesses and option.dist == "no" and not option.distload:
        option.dist = "loadgroup"


def _unit_lane_only(config: pytest.Config) -> bool:
    """Whether every path selected lies in tests/unit (`tests/unit`, a file, a node id there)."""
    chosen = [(config.invocation_params.dir / arg.split("::")[0]).resolve() for arg in config.args]
    return bool(chosen) and all(path == UNIT or UNIT in path.parents for path in chosen)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.fixture(autouse=True)
def _temporary_home(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs against its own home: in-process commands read RLRUN_HOME, and a database
    URL from the developer's shell never reaches a test."""
    monkeypatch.setenv("RLRUN_HOME", str(home))
    monkeypatch.delenv("RLRUN_DB", raising=False)


@pytest.fixture
def cli(home: Path) -> Callable[..., Result]:
    """`cli("ls", "--json")`: `rlrun ls --json` in-process against this test's home."""
    return lambda *args, **kwargs: invoke(home, *args, **kwargs)


@pytest.fixture(scope="session")
def trained_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny real training (reinforce_cartpole, TINY) per test session, named `tiny`, for the
    tests that only read a trained home (they are `slow`). A test that changes it works on
    `trained_copy`."""
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
