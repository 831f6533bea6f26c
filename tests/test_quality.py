"""The code stays ruff- and mypy-clean (configured in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# Slow: ruff and mypy over the whole tree take tens of seconds. They stay in the full suite, the
# README's command that CI runs, so CI still lints; the unit lane leaves them out.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
MYPY_CACHE = Path(tempfile.gettempdir()) / "rlrun-mypy-cache"
"""mypy's incremental cache, kept outside the checkout so that it outlives it: a fresh clone (CI's)
otherwise analyses torch's and the other libraries' types again, ~35 CPU seconds of CI's ~40 for this
test; with it, ~1 s plus rlrun's changed modules. Safe to share between checkouts and concurrent runs:
mypy rechecks a module whose source hash differs from the cached one, and replaces cache files whole."""


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
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(MYPY_CACHE)], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
