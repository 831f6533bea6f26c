"""`rlrun import sb3 PATH...`: RL Zoo / Stable-Baselines3 log folders as foreign runs
(rlrun.imports). `rlrun import` (rlrun.cli.home) hands its arguments here when the first is a
library's name (`SOURCES`): a run folder is named by its run id, never so."""

from pathlib import Path

from rlrun.cli.output import say
from rlrun.errors import BadInput

SOURCES = ("sb3",)
"""The libraries whose runs `rlrun import` reads, as its first argument names them."""


def names_a_source(folders: list[Path]) -> bool:
    """Whether `rlrun import`'s arguments start with a library's name (`rlrun import sb3 logs/`)."""
    return bool(folders) and str(folders[0]) in SOURCES


def import_foreign(folders: list[Path], home: str | None, *, move: bool) -> None:
    """Import the log folders after the library's name, one line per run: they are read where
    they are (their evaluations go into the registry), never copied or moved."""
    from rlrun.cli.views import described
    from rlrun.imports.zoo import import_sb3

    source, *logs = folders
    if move:
        raise BadInput(f"--move moves rlrun's run folders; {source} log folders are read where they are: leave it out")
    if not logs:
        raise BadInput(f"name the log folders to import, e.g. `rlrun import {source} logs/` (the zoo's -f folder)")
    report = import_sb3(logs, home=home)
    for run in report.imported:
        say(f"imported {described(run)} from {source}: compare it with `rlrun compare {run.name} ...`")
    for name in report.already:
        say(f"{name} is imported already: nothing to do")
