"""Where things live: the runs home, the registry file and each run's folder.

Paths stored in the registry are relative to the home, so a home can be moved or copied whole.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from rlrun import storage
from rlrun.errors import BadInput

HOME_ENV = "RLRUN_HOME"
DB_ENV = "RLRUN_DB"
REGISTRY_FILE = "registry.sqlite"
RUN_MANIFEST = "run.json"
"""Each run folder's manifest (owned by `rlrun.registry.manifest`); its name is here so that a run
folder can be recognised without the registry."""
DEFAULT_HOME = Path("runs")


def resolve_home(home: Path | str | None = None) -> Path:
    """The runs home: the argument, else $RLRUN_HOME, else ./runs. A path that cannot be a folder
    (a file, inside a file, too long) is bad input here, before anything is read or written. A URL
    (`s3://bucket/prefix`) is a home in object storage: its local working copy is returned
    (`rlrun.storage`), and its registry must be in $RLRUN_DB."""
    if home is not None:
        given, source = home, "--home"
    elif os.environ.get(HOME_ENV):
        given, source = os.environ[HOME_ENV], f"${HOME_ENV}"
    else:
        given, source = DEFAULT_HOME, "the runs home"
    if storage.is_url(given):
        if not os.environ.get(DB_ENV):
            raise BadInput(
                f"{source} {given} is in object storage, where no registry file can live; set {DB_ENV}"
                " (sqlite:////path/registry.sqlite on one machine, postgresql+psycopg://… for a cluster)"
            )
        return storage.open_home(str(given))
    resolved = Path(given).expanduser().absolute()
    check_folder(resolved, source)
    return resolved


def check_folder(folder: Path, source: str) -> None:
    """`folder` may be missing (it is made when first written) but must be able to be a folder;
    otherwise bad input, naming `source` (where the path came from, "--home")."""
    what = f"{source} {folder}"
    try:
        if stat.S_ISDIR(folder.stat().st_mode):
            return
        file = folder
    except FileNotFoundError:
        return
    except NotADirectoryError:
        file = next((p for p in reversed(folder.parents) if p.is_file()), folder)
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            raise BadInput(f"{what}: the path is too long for the file system; give a shorter one") from None
        raise BadInput(f"{what} cannot be used ({error.strerror}); give another folder") from None
    where = "" if file == folder else f": {file}"
    raise BadInput(f"{what}{where} is a file, not a folder; give a folder")


def task_home(home: str) -> Path:
    """The home a session task names (`home_address`), as a folder on this machine."""
    return storage.open_home(home) if storage.is_url(home) else Path(home)


def home_address(home: Path) -> str:
    """How a session on another machine names `home`: its URL for a home in object storage."""
    return storage.address(home)


def database_url(home: Path) -> str:
    """$RLRUN_DB when set, else the SQLite file inside the home."""
    return os.environ.get(DB_ENV) or f"sqlite:///{home / REGISTRY_FILE}"


SEARCHES_DIR = "searches"
"""Where a home keeps its searches' manifests, one `<search id>.json` each (no run id is this short)."""


def search_manifest(home: Path, search_id: str) -> Path:
    return home / SEARCHES_DIR / f"{search_id}.json"


def run_dir(home: Path, run_id: str) -> Path:
    return home / run_id


def session_dir(home: Path, run_id: str, session_index: int) -> Path:
    return run_dir(home, run_id) / f"s{session_index}"


def checkpoints_dir(home: Path, run_id: str, session_index: int) -> Path:
    return session_dir(home, run_id, session_index) / "checkpoints"


def eval_video(home: Path, run_id: str, session_index: int, frame: int) -> Path:
    """The video of the session's evaluation at `frame` (`meta.eval_video`)."""
    return session_dir(home, run_id, session_index) / "videos" / f"eval-{frame}.mp4"
