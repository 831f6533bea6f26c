"""The docs' one-machine cluster recipe (docs/tutorials/cluster.md), `scripts/one-machine-cluster.sh`,
run as a user runs it: a Ray head on loopback with its own temp folder, a tiny two-session training
through `--ray`, and that cluster stopped — its processes gone, no other Ray on the machine touched."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import cli_env, invoke

pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'rlrun[ray]')")
pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "one-machine-cluster.sh"


def ray_processes_of(temp_dirs: set[str]) -> list[str]:
    """Command lines of running processes that name one of these Ray temp folders."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(folder in command for folder in temp_dirs):
            found.append(command)
    return found


def test_the_one_machine_cluster_recipe_trains_on_ray_and_stops_only_its_cluster(tmp_path: Path) -> None:
    home = tmp_path / "runs"
    rlrun_bin = Path(shutil.which("rlrun") or sys.executable).parent  # the venv's, as a user's PATH has it
    env = {**cli_env(home), "PATH": f"{rlrun_bin}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(SCRIPT), str(home)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [run] = invoke(home, "ls", "--json").json()
    assert (run["status"], run["num_sessions"], run["session_frame"]) == ("finished", 2, 3000)
    detail = invoke(home, "show", "latest", "--json").json()
    assert len(detail["attempts"]) == 2 and all(a["node"] for a in detail["attempts"])  # Ray tasks, on its node
    temp = re.search(r"temp folder (\S+)", done.stderr)
    assert temp, done.stderr
    assert not Path(temp[1]).exists()  # its temp folder removed, and no process left that names it
    assert not ray_processes_of({temp[1]})
