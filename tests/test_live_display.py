"""The live training table on a real terminal: `rlrun train` with a pseudo-terminal as its stderr,
at 60, 80 and 120 columns. The table drops its least important columns to fit, so no word is cut
(Rich marks a cut with `…`) and no line is wider than the terminal."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TINY, cli_env, on_a_terminal

pytestmark = pytest.mark.slow


def train_on_a_terminal(home: Path, columns: int) -> str:
    """What `rlrun train` draws on a terminal `columns` wide, escape sequences removed."""
    return on_a_terminal(home, columns, "train", "reinforce_cartpole", *TINY, "--sessions", "2")


@pytest.mark.parametrize("columns", [60, 80, 120])
def test_the_live_table_fits_the_terminal_without_cutting_a_word(tmp_path: Path, columns: int) -> None:
    drawn = train_on_a_terminal(tmp_path, columns)
    lines = [line for line in re.split(r"\r\n|\r|\n", drawn) if line.strip()]
    table = [line for line in lines if re.match(r"\s*(session|s[01]) ", line)]
    assert table, drawn  # the live table was drawn, not the plain lines
    assert not [line for line in lines if "…" in line], drawn
    assert not [line for line in lines if len(line) > columns], drawn
    header = next(line for line in table if line.lstrip().startswith("session"))
    for kept in ("session", "frames", "done", "status"):
        assert kept in header.split()
    assert table[-1].split()[-1] == "finished"
    if columns >= 120:  # wide enough for every column
        assert "episodes" in header.split() and "seed" in header.split()
    else:  # a narrow terminal drops the least important first
        assert "seed" not in header.split()


def test_off_a_terminal_each_report_is_a_plain_line(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "rlrun", "train", "reinforce_cartpole", *TINY],
        env={**cli_env(tmp_path), "COLUMNS": "60"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    assert "\x1b[" not in completed.stderr and "…" not in completed.stderr
    assert re.search(r"^s0 frame 1k/3k .* f/s  episodes \d+  return ", completed.stderr, re.M), completed.stderr
    assert re.search(r"^s0 finished at frame 3k, best eval ", completed.stderr, re.M), completed.stderr
