"""Helpers shared by the tests (and tests/benchmarks): run `rlrun` in-process (`invoke`) or as a
real subprocess (`rlrun`, `popen`, `run_cli`) against a home, the small trainings the tests use
(TINY, FAST, `builtin_for`, `fast`, the search spec) and what they read back from a home.

A plain module on the tests' path (`pythonpath` in pyproject.toml), not conftest: conftest holds only
fixtures and hooks, and no test file imports another. Light on purpose (rlrun is imported inside the
functions): conftest imports it for every test, the unit lane's included."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zygote

# ---- trainings the tests use --------------------------------------------------------------------

# A tiny but real training: CartPole, 3k frames, evaluations and snapshots every 1k.
TINY = [
    "--frames",
    "3000",
    "--set",
    "meta.eval_frequency=1000",
    "--set",
    "meta.checkpoint_frequency=1000",
    "--set",
    "meta.num_eval_episodes=2",
    "--set",
    "meta.log_frequency=1000",
]


# Smaller networks, batches and memories for the algorithms whose built-in specs are expensive
# per frame: the code paths (and what a snapshot must hold) are the same, the tests much faster.
FAST = {
    "dqn": [
        "agent.learning_starts=500",
        "agent.train_frequency=16",
        "agent.gradient_steps=2",
        "agent.batch_size=32",
        "agent.network.hidden=[64, 64]",
        "agent.memory.capacity=20000",
    ],
    "sac": [
        "agent.learning_starts=200",
        "agent.train_frequency=16",
        "agent.batch_size=32",
        "agent.network.hidden=[32, 32]",
        "agent.memory.capacity=20000",
    ],
    "ppo": ["agent.n_steps=64", "agent.batch_size=64", "agent.n_epochs=2"],
}


# Classic-control families, the one the tests prefer first: a SAC test trains sac_pendulum, not the
# zoo's sac_mountaincar_continuous (gSDE, 32 gradient steps of 512 every 32 frames) that sorts before it.
CLASSIC_CONTROL = ("CartPole", "Pendulum", "Acrobot", "MountainCar", "MountainCarContinuous")


def builtin_for(algorithm: str) -> str:
    """The built-in spec that exercises `algorithm` in tests: its CartPole spec if it has one."""
    from rlrun.spec import builtin_document, builtin_names

    names = [n for n in builtin_names() if builtin_document(n)["agent"]["algorithm"] == algorithm]
    preferred = [n for n in names if n.endswith("_cartpole") and not n.startswith("ddqn")]
    # Otherwise a classic-control env: quick to step, and it renders without OpenGL (MuJoCo's needs it).
    family = {n: builtin_document(n)["env"]["id"].split("-")[0] for n in names}
    classic = sorted((n for n in names if family[n] in CLASSIC_CONTROL), key=lambda n: CLASSIC_CONTROL.index(family[n]))
    return (preferred or classic or names)[0]


def fast(spec: str) -> list[str]:
    from rlrun.spec import builtin_document

    return [arg for edit in FAST.get(builtin_document(spec)["agent"]["algorithm"], []) for arg in ("--set", edit)]


# The search the search tests run: reinforce_cartpole's learning rate and entropy coefficient.
SPACE = {"agent.optimizer.lr": {"loguniform": [1e-4, 3e-3]}, "agent.entropy_coef": {"uniform": [0.0, 0.05]}}


def search_spec(folder: Path) -> Path:
    from rlrun.spec import builtin_document

    document = builtin_document("reinforce_cartpole")
    document["meta"].update(
        max_frame=3000, eval_frequency=1000, checkpoint_frequency=1000, num_eval_episodes=2, log_frequency=1000
    )
    document["search"] = SPACE
    path = folder / "search.json"
    path.write_text(json.dumps(document))
    return path


# ---- running rlrun ------------------------------------------------------------------------------


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def cli_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RLRUN_HOME", "RLRUN_DB", "DISPLAY", "WAYLAND_DISPLAY")}
    env.update(home_settings(home))
    return env


def home_settings(home: Path) -> dict[str, str]:
    """How a command names the test's `home`: the folder; or, for a home in object storage (the
    `home` fixture's "s3" kind, `store_home`), its URL, the registry file in the test's folder, and
    a working copy of its own that no other command shares, so everything a command reads it
    reads from the store."""
    from rlrun import storage

    mirror = storage.mirror_of(home)
    if mirror is None or mirror.local != home:
        return {"RLRUN_HOME": str(home)}
    import tempfile

    caches = home.parent / "working-copies"
    caches.mkdir(parents=True, exist_ok=True)
    return {
        "RLRUN_HOME": mirror.url,
        "RLRUN_DB": f"sqlite:///{home / 'registry.sqlite'}",
        storage.CACHE_ENV: tempfile.mkdtemp(dir=caches),
    }


def store_home(url: str, folder: Path) -> Path:
    """A runs home at `url` in object storage whose registry file and this process's working copy
    are `folder`: tests read it (`Registry.open(home)`, `snapshot.read(home / path)`) as they read a
    local home, every snapshot then downloaded from the store."""
    from rlrun import storage

    folder.mkdir(parents=True, exist_ok=True)
    return storage.open_home(url, local=folder)


def rlrun(home: Path, *args: str, timeout: float = 300) -> Result:
    """`rlrun ARGS` as a process of its own (forked from the zygote: tests/zygote.py)."""
    done = zygote.run(list(args), cli_env(home), timeout=timeout)
    return Result(done.returncode, done.stdout, done.stderr)


def run_cli(home: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    """`rlrun` as a process of its own with extra environment variables (test hooks: crash points, signals)."""
    done = zygote.run(list(args), {**cli_env(home), **(env or {})}, timeout=300)
    return Result(done.returncode, done.stdout, done.stderr)


def popen(home: Path, *args: str) -> Any:
    """`rlrun ARGS` started as a process of its own, its stdout and stderr piped: a `subprocess.Popen`'s interface."""
    return zygote.start(list(args), cli_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@contextlib.contextmanager
def environment(home: Path | None, env: dict[str, str] | None = None) -> Iterator[None]:
    """This process's environment as a command against `home` sees it (`home_settings`), put back after."""
    saved = dict(os.environ)
    try:
        os.environ.pop("RLRUN_DB", None)
        if home is not None:
            os.environ.update(home_settings(home))
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
    with environment(home, env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _stdin(stdin):
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


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
"""Escape sequences Rich writes on a terminal: colours, cursor moves, line erases, cursor hiding."""


def on_a_terminal(home: Path, columns: int, *args: str, cwd: Path | None = None) -> str:
    """What `rlrun ARGS` draws on its stdout and stderr, both a pseudo-terminal `columns` wide and 40 lines high, its
    escape sequences removed; the command must exit 0. A fresh interpreter (as a user's shell starts
    it), with no colour or terminal setting of the test's environment forced on it."""
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {**cli_env(home), "COLUMNS": str(columns), "LINES": "40", "TERM": "xterm-256color"}
    for forced in ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        env.pop(forced, None)
    process = subprocess.Popen(
        [sys.executable, "-m", "rlrun", *args],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env=env,
        cwd=cwd,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert process.wait(timeout=300) == 0
    return ANSI.sub("", b"".join(chunks).decode("utf-8", "replace"))


# A command line run in a fresh interpreter that reports which heavy packages it imported.
PROBE = (
    "import sys\n"
    "from rlrun.cli import main\n"
    "sys.argv = ['rlrun'] + sys.argv[1:]\n"
    "try:\n    main()\nexcept SystemExit:\n    pass\n"
    "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'gymnasium', 'sqlalchemy', 'rich'})\n"
    "sys.stderr.write('HEAVY=' + ','.join(heavy) + '\\n')\n"
)


def heavy_modules(home: Path, *args: str) -> str:
    """The heavy packages (PROBE's) that `rlrun ARGS` imported, comma-separated."""
    done = subprocess.run([sys.executable, "-c", PROBE, *args], env=cli_env(home), capture_output=True, text=True)
    return done.stderr.rsplit("HEAVY=", 1)[1].strip()


# ---- reading a home back ------------------------------------------------------------------------


def run_attempts(home: Path, reference: str = "latest") -> list[Any]:
    from rlrun.registry import Registry

    with Registry.open(home, create=False) as registry:
        return registry.get_run(registry.resolve(reference).id).attempts


def trials(home: Path, search: str = "search:latest") -> list[Any]:
    from rlrun.registry import Registry

    with Registry.open(home, create=False) as registry:
        return registry.get_search(registry.resolve_search(search).id).trials


def snapshot_of(home: Path) -> tuple[dict[str, list[Any]], list[tuple[str, int, float]]]:
    """Every registry row and every file (with size and modification time) under the home."""
    with sqlite3.connect(home / "registry.sqlite") as db:
        tables = [name for (name,) in db.execute("select name from sqlite_master where type = 'table'")]
        rows = {table: db.execute(f"select * from {table} order by 1").fetchall() for table in tables}
    files = sorted(
        (str(p.relative_to(home)), p.stat().st_size, p.stat().st_mtime)
        for p in home.rglob("*")
        if p.is_file() and not p.name.startswith("registry.sqlite")
    )
    return rows, files


GCS_SETTINGS = {"FSSPEC_GS_TOKEN": "anon", "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}
"""How every process reaches the GCS emulator, each library's own way (besides gcsfs's
STORAGE_EMULATOR_HOST): anonymous requests (fsspec's configuration from the environment: without it
gcsfs would try the machine's Google credentials, then the metadata server), and gcsfs's plain JSON-API
file system: its default one first asks the bucket's layout of Storage Control, a gRPC service no
emulator serves, and warns on every call."""
