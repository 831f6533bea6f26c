"""A run remembers its home (issue 43): a registry in $RLRUN_DB lists runs of several homes, and each
run's row records the home it lives in (`runs.home`). A command given another home (or none) never
takes a run of an S3 home for a missing or damaged one: `show`, `ls` and `rm` find it in its home
(`rm` deletes its objects and its working copy, or refuses naming its home when the store cannot be
reached); `enjoy` and `resume`, which work in a home, say in one line where it lives and how to name
it (exit 2). Messages name the run by its home's URL, never by a working copy's path.

Real S3 (moto's server on loopback, conftest.py's s3_bucket), tiny trainings in this process.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers import environment, invoke, run_cli

from rlrun import storage
from rlrun.registry import Registry

pytestmark = pytest.mark.slow  # real trainings, a real S3 server

TINY_EDITS = [
    "meta.max_frame=2000",
    "meta.eval_frequency=1000",
    "meta.checkpoint_frequency=1000",
    "meta.num_eval_episodes=1",
    "meta.log_frequency=1000",
]


def _train(home: str, env: dict[str, str], local: Path) -> str:
    """A tiny run trained in `home` (a URL or a folder) through the Python API; its id."""
    import rlrun

    with environment(local, env):
        result = rlrun.train(rlrun.load_spec("reinforce_cartpole", TINY_EDITS), home=home, handle_signals=False)
    assert result.status == "finished", result
    return result.run_id


@pytest.fixture
def s3_run(s3_bucket: str, home: Path, tmp_path: Path) -> dict[str, Any]:
    """A run trained in an S3 home, its registry in $RLRUN_DB; later commands are given the test's
    local home (`home`), or none, with the same $RLRUN_DB."""
    url = f"s3://{s3_bucket}/{uuid.uuid4().hex[:8]}/runs"
    env = {"RLRUN_DB": f"sqlite:///{tmp_path / 'shared.sqlite'}", storage.CACHE_ENV: str(tmp_path / "cache")}
    run_id = _train(url, env, home)
    return {"url": url, "id": run_id, "env": env}


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def test_an_s3_run_named_without_its_home(s3_run: dict[str, Any], home: Path, tmp_path: Path) -> None:
    url, run_id, env = s3_run["url"], s3_run["id"], s3_run["env"]
    folder = f"{url}/{run_id}"
    cache = str(tmp_path / "cache")

    with environment(home, env):
        assert Registry.open(home, create=False).resolve(run_id, anywhere=True).home == url  # recorded

    # enjoy and resume work in a home: one line that says where the run lives and how to name it, exit 2
    for args in (("enjoy", "latest", "--episodes", "1"), ("resume", "latest", "--frames", "3000")):
        done = invoke(home, *args, env=env)
        line = _one_line(done.stderr)
        assert done.code == 2, done.stderr
        assert f"lives in another home, {folder}, not in {home}; name its home: --home {url}" in line, line
        assert "missing" not in line and "damaged" not in line

    # show and ls read the registry: the run, named by its URL, never the working copy's path
    shown = invoke(home, "show", "latest", env=env)
    assert shown.code == 0, shown.stderr
    assert shown.stderr.startswith(f"latest → run {run_id}, reinforce_cartpole, finished, in {folder}\n"), shown.stderr
    assert cache not in shown.stdout + shown.stderr
    listed = invoke(home, "ls", "--home", url, "--algo", "ppo", env=env)
    assert listed.code == 0 and f"(1 runs in {url})" in listed.stderr, listed.stderr  # nothing listed: a note
    assert f"see `rlrun ls --home {url}`" in listed.stderr  # the hint keeps the home it was given
    assert cache not in listed.stdout + listed.stderr
    assert invoke(home, "ls", "--json", env=env).json()[0]["home"] == url

    # named with its home, enjoy works, and says where the run is by its URL
    enjoyed = invoke(home, "enjoy", "latest", "--episodes", "1", "--home", url, env=env)
    assert enjoyed.code == 0, enjoyed.stderr
    assert f"in {folder}" in enjoyed.stderr and cache not in enjoyed.stderr


def test_rm_without_its_home_deletes_the_objects_and_the_working_copy(
    s3_run: dict[str, Any], home: Path, tmp_path: Path
) -> None:
    url, run_id, env = s3_run["url"], s3_run["id"], s3_run["env"]
    with environment(home, env):
        mirror = storage.mirror_of(storage.open_home(url))
        assert mirror is not None
        stored = mirror.sizes(mirror.root)
        copy = storage.working_copy(url) / run_id
    assert stored and copy.is_dir()

    # the store does not answer: refused, naming the run's home, nothing deleted (exit 3). A process
    # of its own: this one keeps the store's client it trained with.
    down = {**env, "AWS_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_MAX_ATTEMPTS": "1"}
    refused = run_cli(home, "rm", "latest", "--yes", env=down)
    assert refused.code == 3, refused.stderr
    assert f"run {run_id} lives in {url}/{run_id}, which this command cannot reach" in _one_line(refused.stderr)
    assert "nothing deleted" in refused.stderr
    assert mirror.sizes(mirror.root) == stored and copy.is_dir()

    removed = invoke(home, "rm", "latest", "--yes", env=env)
    assert removed.code == 0, removed.stderr
    assert f"in {url}/{run_id}" in removed.stderr
    freed = sum(stored.values())
    from rlrun.cli.views import format_bytes

    assert f"deleted 1 run and {format_bytes(freed)} of files" in removed.stderr, removed.stderr
    assert mirror.keys(mirror.root) == [], "rm left objects in the store"
    assert not copy.exists(), "rm left the working copy"
    with environment(home, env):
        assert Registry.open(home, create=False).run_ids() == set()


def test_local_homes_sharing_a_registry_and_a_home_moved_whole(home: Path, tmp_path: Path) -> None:
    """Two local homes, one registry: a run of the other home is refused by enjoy (naming its home),
    shown and removed where it lives, left alone by gc; a home moved whole (its registry file with it)
    keeps its runs."""
    import shutil

    other = tmp_path / "other"
    env = {"RLRUN_DB": f"sqlite:///{tmp_path / 'shared.sqlite'}"}
    run_id = _train(str(other), env, home)
    refused = invoke(home, "enjoy", "latest", "--episodes", "1", env=env)
    assert refused.code == 2 and f"lives in another home, {other}/{run_id}, not in {home}" in refused.stderr
    shown = invoke(home, "show", "latest", env=env)
    assert shown.code == 0 and f", in {other}/{run_id}\n" in shown.stderr, shown.stderr
    collected = invoke(home, "gc", "--json", env=env)  # the other home's snapshots are not this home's garbage
    assert collected.code == 0, collected.stderr
    assert (collected.json()["other_homes"], collected.json()["missing"], collected.json()["retired"]) == (
        [run_id],
        [],
        [],
    )
    removed = invoke(home, "rm", run_id, "--yes", env=env)
    assert removed.code == 0 and f", in {other}/{run_id}\n" in removed.stderr, removed.stderr
    assert not (other / run_id).exists()

    # no $RLRUN_DB: the registry file is in the home, and moves with it
    run_id = _train(str(other), {}, home)
    moved = tmp_path / "moved"
    shutil.move(other, moved)
    enjoyed = invoke(moved, "enjoy", "latest", "--episodes", "1")
    assert enjoyed.code == 0, enjoyed.stderr
    assert json.loads(invoke(moved, "show", run_id, "--json").stdout)["run"]["home"] == str(other)


def test_a_rebuilt_registry_records_the_home_it_was_rebuilt_from(
    s3_run: dict[str, Any], home: Path, tmp_path: Path
) -> None:
    url, run_id, env = s3_run["url"], s3_run["id"], s3_run["env"]
    (tmp_path / "shared.sqlite").unlink()
    rebuilt = invoke(home, "db", "rebuild", "--home", url, "--json", env=env)
    assert rebuilt.code == 0 and rebuilt.json()["restored"] == [run_id], rebuilt.stderr
    refused = invoke(home, "resume", run_id, "--frames", "3000", env=env)
    assert refused.code == 2 and f"--home {url}" in refused.stderr, refused.stderr
