"""The built wheel installs into a fresh virtual environment, ships its migrations, and creates a
registry by training for real."""

from __future__ import annotations

import json
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
                   check=True, capture_output=True, text=True)
    (built,) = out.glob("rlrun-*.whl")
    return built


def test_wheel_ships_the_package_migrations_and_specs(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "rlrun/migrations/env.py" in names
    assert any(n.startswith("rlrun/migrations/versions/0001") for n in names)
    assert "rlrun/specs/reinforce_cartpole.json" in names
    assert not any(n.startswith(("tests/", "runs/", "migrations/")) for n in names)


def test_installed_wheel_trains_and_creates_a_registry(wheel: Path, tmp_path: Path) -> None:
    # The dependencies (torch above all) come from the environment running the tests; the wheel
    # itself is installed into the new environment without them, so nothing is downloaded.
    environment = tmp_path / "venv"
    venv.create(environment, system_site_packages=True, with_pip=True)
    python = environment / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True, text=True)
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = subprocess.run([str(python), "-c", "import rlrun; print(rlrun.__file__)"], cwd=work, check=True,
                           capture_output=True, text=True).stdout
    assert where.startswith(str(environment)), where
    done = subprocess.run(
        [str(environment / "bin" / "rlrun"), "train", "reinforce_cartpole", "--frames", "500", "--set",
         "meta.eval_frequency=500", "--set", "meta.num_eval_episodes=1", "--json"],
        cwd=work, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "finished"
    assert (work / "runs" / "registry.sqlite").is_file()
    listed = subprocess.run([str(environment / "bin" / "rlrun"), "ls", "--json"], cwd=work, capture_output=True,
                            text=True, check=True)
    assert len(json.loads(listed.stdout)) == 1
