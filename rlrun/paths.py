"""Where things live: the runs home, the registry file and each run's folder.

Paths stored in the registry are relative to the home, so a home can be moved or copied whole.
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "RLRUN_HOME"
DB_ENV = "RLRUN_DB"
REGISTRY_FILE = "registry.sqlite"
DEFAULT_HOME = Path("runs")


def resolve_home(home: Path | str | None = None) -> Path:
    """The runs home: the argument, else $RLRUN_HOME, else ./runs."""
    chosen = home if home is not None else os.environ.get(HOME_ENV) or DEFAULT_HOME
    return Path(chosen).expanduser().absolute()


def database_url(home: Path) -> str:
    """$RLRUN_DB when set, else the SQLite file inside the home."""
    return os.environ.get(DB_ENV) or f"sqlite:///{home / REGISTRY_FILE}"


def run_dir(home: Path, run_id: str) -> Path:
    return home / run_id


def session_dir(home: Path, run_id: str, session_index: int) -> Path:
    return run_dir(home, run_id) / f"s{session_index}"


def checkpoints_dir(home: Path, run_id: str, session_index: int) -> Path:
    return session_dir(home, run_id, session_index) / "checkpoints"
