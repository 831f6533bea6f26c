"""`rlrun` commands as real processes of their own, started in a tenth of the time: forked from a
zygote that has imported torch and rlrun once, instead of a fresh interpreter importing them again
(2.5 CPU-seconds each, most of what a tiny test training costs).

Each command is a real process with its own pid, environment, working directory, stdio and (when
asked) session: signals, kill -9, crash points and orphaned children are what they are for
`python -m rlrun`. The zygote is multiprocessing's forkserver, started once per test process with
torch and rlrun's command line preloaded; it forks each command, and `Command` gives the test what
`subprocess.Popen` gives (pid, poll, wait, communicate, send_signal, kill, stdout, stderr).

What differs from a fresh interpreter, and why it does not matter here: the command is the
zygote's child, not the test process's (its exit status comes through multiprocessing's pipe, as a
Popen's does through waitpid); modules are imported once, before the command's environment is set
(rlrun reads its environment when it runs, never at import); every command shares the zygote's
hash seed; and atexit handlers do not run (stdio is flushed and closed explicitly).
"""

from __future__ import annotations

import contextlib
import io
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from multiprocessing import reduction
from pathlib import Path
from typing import IO, Any

from rlrun.algorithms import algorithm_names
from rlrun.training.zygote import startup_variables

PRELOAD = [
    "torch",
    "gymnasium",
    "rlrun.cli",
    "rlrun.cli.display",
    "rlrun.cli.views",
    "rlrun.training.api",
    "rlrun.training.local",
    "rlrun.training.supervisor",
    "rlrun.session.loop",
    *(f"rlrun.algorithms.{name}" for name in algorithm_names()),
    "rlrun.registry.server",
    "rlrun.registry.tables",
    "rlrun.catalog.listing",
    "rlrun.catalog.targets",
    "rlrun.home.folders",
    "sqlalchemy.dialects.sqlite",
    "alembic.command",
    "alembic.config",
    "alembic.runtime.migration",
]
"""What every command would import anyway (a registry on PostgreSQL, emptied for each test, is
brought to the head by Alembic's migrations): the zygote pays for it once."""

OPENMP_WAIT_POLICY = "OMP_WAIT_POLICY"

_context: Any = None
_startup: dict[str, str] = {}
_fresh_path: list[str] = []


def _zygote() -> Any:
    global _context
    if _context is None:
        from multiprocessing import forkserver

        # sys.path as `python -m` starts with it (no pytest additions), the folder it runs in first.
        found = subprocess.run(
            [sys.executable, "-c", "import sys, json; print(json.dumps(sys.path[1:]))"],
            capture_output=True,
            text=True,
            check=True,
        )
        _fresh_path[:] = json.loads(found.stdout)
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
        # OpenMP reads its wait policy once, as torch loads: in the zygote, as a training command
        # loads it (rlrun.spec.cores.let_idle_threads_sleep).
        saved = dict(os.environ)
        os.environ.setdefault(OPENMP_WAIT_POLICY, "PASSIVE")
        try:
            _startup.update(_startup_variables(os.environ))
            forkserver.ensure_running()
        finally:
            os.environ.clear()
            os.environ.update(saved)
    return _context


def _startup_variables(env: Mapping[str, str]) -> dict[str, str]:
    """What of `env` an interpreter reads as it starts (rlrun's session zygote's rule: a command
    whose environment sets them otherwise than the zygote's runs as a fresh interpreter), a
    training command's OpenMP policy included; PYTHONUNBUFFERED aside, `_command_main` applying it."""
    started = startup_variables(env)
    started.pop("PYTHONUNBUFFERED", None)
    return {OPENMP_WAIT_POLICY: "PASSIVE", **started}


def suits(env: Mapping[str, str]) -> bool:
    """Whether a command with environment `env` may be forked from the zygote."""
    _zygote()
    return _startup_variables(env) == _startup


class _Fd:
    """A file descriptor handed to the forked command (multiprocessing sends it over its socket)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> Any:
        return _received, (reduction.DupFd(self.fd),)


def _received(duplicate: Any) -> int:
    return duplicate.detach()


def _command_main(
    argv: list[str], env: dict[str, str], cwd: str, path: list[str], stdio: tuple[int, int, int], new_session: bool
) -> None:
    """In the forked process: become `python -m rlrun ARGV` run with `env` in `cwd`, then exit with
    its code."""
    if new_session:
        os.setsid()
    for source, target in zip(stdio, (0, 1, 2), strict=True):
        os.dup2(source, target)
        os.close(source)
    # As Python's own start-up leaves them: Ctrl-C raises KeyboardInterrupt, SIGPIPE is ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.path[:] = [cwd, *path]
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    sys.stdin = io.TextIOWrapper(os.fdopen(0, "rb", buffering=0 if unbuffered else -1), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(
        os.fdopen(1, "wb", buffering=0 if unbuffered else -1), encoding="utf-8", write_through=unbuffered
    )
    sys.stderr = io.TextIOWrapper(
        os.fdopen(2, "wb", buffering=0), encoding="utf-8", line_buffering=True, write_through=True
    )
    import rlrun

    sys.argv = [str(Path(rlrun.__path__[0]) / "__main__.py"), *argv]  # as `python -m rlrun` sets it
    code: Any = 0
    try:
        from rlrun.cli import main

        main()
    except SystemExit as ended:
        code = ended.code
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    os._exit(code)


class Command:
    """`python -m rlrun ARGV` as `subprocess.Popen` would start it, forked from the zygote."""

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        *,
        stdin: Any = None,
        stdout: Any = None,
        stderr: Any = None,
        text: bool = False,
        start_new_session: bool = False,
        cwd: str | Path | None = None,
    ) -> None:
        self.args = argv
        self.returncode: int | None = None
        self.stdout: IO[Any] | None = None
        self.stderr: IO[Any] | None = None
        ends: list[int] = []  # the child's ends, closed here once it has them
        child_stdio: list[_Fd] = []
        for index, (wanted, mode) in enumerate(((stdin, "w"), (stdout, "r"), (stderr, "r"))):
            same_as_stdout = index == 2 and wanted == subprocess.STDOUT
            fd = child_stdio[1].fd if same_as_stdout else self._child_end(index, wanted, mode, text, ends)
            child_stdio.append(_Fd(fd))
        process = _zygote().Process(
            target=_command_main,
            name="rlrun-command",
            args=(argv, env, str(cwd or os.getcwd()), _fresh_path, tuple(child_stdio), start_new_session),
        )
        try:
            process.start()
        finally:
            for fd in ends:
                os.close(fd)
        # Not one of multiprocessing's children: it would join them when this process exits, where
        # a command left running (as a Popen's would be) must not hold the test process up.
        multiprocessing.process._children.discard(process)  # type: ignore[attr-defined]
        self._process = process
        self.pid: int = process.pid

    def _child_end(self, index: int, wanted: Any, mode: str, text: bool, ends: list[int]) -> int:
        if wanted == subprocess.PIPE:
            read, write = os.pipe()
            mine, theirs = (write, read) if mode == "w" else (read, write)
            stream: IO[Any] = os.fdopen(mine, mode, encoding="utf-8") if text else os.fdopen(mine, mode + "b")
            if index == 1:
                self.stdout = stream
            elif index == 2:
                self.stderr = stream
            ends.append(theirs)
            return theirs
        if wanted is None or wanted == subprocess.DEVNULL:
            fd = os.open(os.devnull, os.O_RDWR)
            ends.append(fd)
            return fd
        return wanted if isinstance(wanted, int) else wanted.fileno()

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:
        """Read stdout and stderr to their ends (threads, so neither pipe fills), then wait."""
        results: dict[str, Any] = {}
        readers = [
            threading.Thread(target=lambda n=name, s=stream: results.__setitem__(n, s.read()), daemon=True)
            for name, stream in (("out", self.stdout), ("err", self.stderr))
            if stream is not None
        ]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(timeout)
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(timeout)
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        return results.get("out"), results.get("err")

    def send_signal(self, number: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, number)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __enter__(self) -> Command:
        return self

    def __exit__(self, *exc: object) -> None:
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


def start(argv: list[str], env: dict[str, str], **options: Any) -> Any:
    """`subprocess.Popen([python, -m, rlrun, *ARGV], env=env, **options)`: forked from the zygote
    where the environment allows (`suits`), else a fresh interpreter."""
    if suits(env):
        return Command(argv, env, **options)
    return subprocess.Popen([sys.executable, "-m", "rlrun", *argv], env=env, **options)


def run(argv: list[str], env: dict[str, str], timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """`subprocess.run([python, -m, rlrun, *ARGV], env=env, capture_output=True, text=True)`."""
    command = start(argv, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = command.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        command.kill()
        command.wait()
        raise
    return subprocess.CompletedProcess(argv, command.wait(), out, err)


def cpu_seconds() -> float:
    """The CPU time of the zygote and of every command it forked that has ended: a command is its
    child, not the test process's, so the test process's own accounting of its children misses it."""
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if _context is None or pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(tick) for tick in fields[11:15]) / os.sysconf("SC_CLK_TCK")  # utime stime cutime cstime
