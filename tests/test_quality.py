"""The code stays ruff- and mypy-clean (configured in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# Slow: ruff and mypy over the whole tree take tens of seconds. They stay in the full suite, the
# README's command that CI runs, so CI still lints; the unit lane leaves them out.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_is_clean() -> None:
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_format_is_clean() -> None:
    """One formatter: `ruff format` owns the layout (a handful of `# fmt: skip` tables say why)."""
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_is_clean() -> None:
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
