"""Rough edges, second pass (issue 53): the answer on stdout and the talk on stderr, through a real
pipe; hints that keep the context they were given; spec errors that name the key; bundles that
keep the umask's mode. No training: a registry row written directly stands for a run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers import cli_env

from rlrun.registry import Registry


def fake_run(home: Path, run_id: str = "a1b2c3d4e5", name: str = "piped") -> str:
    """A run in `home`'s registry, as `rlrun ls` and `show` read it (no folder, no training)."""
    with Registry.open(home) as registry:
        registry.create_run(
            run_id=run_id,
            name=name,
            spec_name="reinforce_cartpole",
            algorithm="reinforce",
            env_id="CartPole-v1",
            max_frame=3000,
            seed=1,
            num_sessions=1,
            spec_json=json.dumps({"name": "reinforce_cartpole"}),
            host="box",
            pid=1,
        )
    return run_id


def test_ls_through_a_real_pipe_finds_the_run_and_stderr_holds_no_table(tmp_path: Path) -> None:
    home = tmp_path / "runs"
    run_id = fake_run(home)
    errors = tmp_path / "stderr.txt"
    done = subprocess.run(
        f"{sys.executable} -m rlrun ls 2> {errors} | grep piped",
        shell=True,
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert run_id in done.stdout and "reinforce_cartpole" in done.stdout
    assert errors.read_text() == ""  # the table went down the pipe, nothing beside it
    shown = subprocess.run(
        f"{sys.executable} -m rlrun show piped | grep -c sessions",
        shell=True,
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0 and int(shown.stdout) >= 1, shown.stdout + shown.stderr
    assert "→ run" in shown.stderr and "sessions" not in shown.stderr  # which run: a note; the detail: stdout
