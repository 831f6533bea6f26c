"""A real PostgreSQL server for the registry tests.

`.ci/run` installs PostgreSQL from Debian's packages and exports RLRUN_TEST_POSTGRES (a URL);
without it, the fixture starts the local server itself with `.ci/start-postgres`. When neither
works, the PostgreSQL tests are skipped with the reason, which `pytest -ra` shows. Each test
session works in a database of its own (dropped at exit), each test in an emptied one.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

URL_ENV = "RLRUN_TEST_POSTGRES"
START = Path(__file__).resolve().parents[1] / ".ci" / "start-postgres"
_found: dict[str, str] = {}  # "url" or "why": what the first attempt found, for the whole session


def _start() -> tuple[str | None, str]:
    """A URL to an empty database of this test session's own on a running server, or None and
    why there is none."""
    url = os.environ.get(URL_ENV)
    if not url:
        try:
            done = subprocess.run(["bash", str(START)], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as error:
            return None, f"cannot run {START.name}: {error}"
        if done.returncode != 0:
            return None, f"{START.name} failed: {(done.stderr or done.stdout).strip().splitlines()[-1:]}"
        url = done.stdout.strip()
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return None, "psycopg is not installed (pip install -e '.[postgres]')"
    try:
        return _own_database(url), ""
    except Exception as error:  # any failure to connect means: no server to test against
        return None, f"cannot connect to {url}: {error}"


def _plain(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def _own_database(url: str) -> str:
    """A database for this process alone, dropped when it exits, so two test suites sharing the
    server never empty each other's tables; the given one when the role may not create one."""
    import atexit

    import psycopg

    name = f"rlrun_test_{os.getpid()}"
    base, _, _ = url.rpartition("/")
    with psycopg.connect(_plain(url), autocommit=True, connect_timeout=10) as conn:
        try:
            conn.execute(f"DROP DATABASE IF EXISTS {name}")
            conn.execute(f"CREATE DATABASE {name}")
        except psycopg.errors.InsufficientPrivilege:
            _reset(url)
            return url
    atexit.register(_drop_database, url, name)
    return f"{base}/{name}"


def _drop_database(url: str, name: str) -> None:
    import psycopg

    try:
        with psycopg.connect(_plain(url), autocommit=True, connect_timeout=10) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    except Exception:  # the server may be gone already: nothing to clean
        pass


def _reset(url: str) -> None:
    """An empty public schema: every test starts from a database without tables."""
    import psycopg

    with psycopg.connect(_plain(url), autocommit=True, connect_timeout=10) as conn:
        conn.execute("DROP SCHEMA IF EXISTS public CASCADE")
        conn.execute("CREATE SCHEMA public")


def server_url() -> str:
    """The server's URL for this session, or skip the calling test saying why there is none."""
    if not _found:
        url, why = _start()
        _found.update({"url": url} if url else {"why": why})
    if "why" in _found:
        pytest.skip(f"PostgreSQL not available: {_found['why']}")
    return _found["url"]


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A URL to an empty PostgreSQL database (emptied again afterwards)."""
    url = server_url()
    _reset(url)
    yield url
    _reset(url)
