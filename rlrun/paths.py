"""Where things live: the runs home, the registry file and each run's folder.

Paths stored in the registry are relative to the home, so a home can be moved or copied whole.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from rlrun.errors import BadInput

HOME_ENV = "RLRUN_HOME"
DB_ENV = "RLRUN_DB"
REGISTRY_FILE = "registry.sqlite"
DEFAULT_HOME = Path("runs")


def resolve_home(home: Path | str | None = None) -> Path:
    """The runs home: the argument, else $RLRUN_HOME, else ./runs. A path that cannot be a folder
    (a file, inside a file, too long) is bad input here, before anything is read or written."""
    chosen = home if home is not None else os.environ.get(HOME_ENV) or DEFAULT_HOME
    resolved = Path(chosen).expanduser().absolute()
    _check_home(resolved)
    return resolved


def _check_home(home: Path) -> None:
    """A home may be missing (it is made when first written) but must be usable as a folder."""
    try:
        is_folder = stat.S_ISDIR(home.stat().st_mode)
    except FileNotFoundError:
        return
    except NotADirectoryError:
        file = next(p for p in reversed(home.parents) if p.is_file())
        raise BadInput(f"--home {home}: {file} is a file, not a folder; give a folder") from None
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            raise BadInput(f"--home {home}: the path is too long for the file system; give a shorter one") from None
        raise BadInput(f"--home {home} cannot be used ({error.strerror}); give another folder") from None
    if not is_folder:
        raise BadInput(f"--home {home} is a file; give a folder")


def database_url(home: Path) -> str:
    """$RLRUN_DB when set, else the SQLite file inside the home."""
    return os.environ.get(DB_ENV) or f"sqlite:///{home / REGISTRY_FILE}"


def run_dir(home: Path, run_id: str) -> Path:
    return home / run_id


def session_dir(home: Path, run_id: str, session_index: int) -> Path:
    return run_dir(home, run_id) / f"s{session_index}"


def checkpoints_dir(home: Path, run_id: str, session_index: int) -> Path:
    return session_dir(home, run_id, session_index) / "checkpoints"
