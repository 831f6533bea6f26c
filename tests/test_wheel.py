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

pytestmark = pytest.mark.slow  # builds a wheel and trains with it

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
    )
    (built,) = out.glob("rlrun-*.whl")
    return built


def test_wheel_ships_the_package_migrations_and_specs(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "rlrun/migrations/env.py" in names
    assert any(n.startswith("rlrun/migrations/versions/0001") for n in names)
    assert "rlrun/spec/builtins/reinforce_cartpole.json" in names
    assert "rlrun/registry/head.sql" in names  # an empty registry's schema
    assert not any(n.startswith(("tests/", "runs/", "migrations/")) for n in names)


def dependency_dirs() -> list[str]:
    """Where this interpreter finds its installed packages: a virtual environment's or the system's
    site-packages. Not the checkout (PYTHONPATH, the editable install's hook), which the test must
    not see."""
    return [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()]


def fresh_environment(where: Path) -> Path:
    """A new virtual environment that sees the dependencies of the one running the tests through a
    .pth file (plain paths: the .pth files in them, such as an editable install's, are not run),
    after its own site-packages. `--system-site-packages` would not do: inside a virtual
    environment it reaches the system's packages, not that environment's."""
    venv.create(where, with_pip=True)
    python = where / "bin" / "python"
    own = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    ).stdout.strip()
    (Path(own) / "zz_test_dependencies.pth").write_text("\n".join(dependency_dirs()) + "\n")
    return python


def test_installed_wheel_trains_and_creates_a_registry(wheel: Path, tmp_path: Path) -> None:
    # The dependencies (torch above all) come from the environment running the tests; the wheel
    # itself is installed into the new environment without them, so nothing is downloaded.
    environment = tmp_path / "venv"
    python = fresh_environment(environment)
    clean = {"PATH": "/usr/bin:/bin"}  # no PYTHONPATH, no RLRUN_HOME: only the installed wheel
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
        text=True,
        env=clean,
    )
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = subprocess.run(
        [str(python), "-c", "import rlrun; print(rlrun.__file__)"],
        cwd=work,
        check=True,
        capture_output=True,
        text=True,
        env=clean,
    ).stdout
    assert where.startswith(str(environment)), where
    done = subprocess.run(
        [
            str(environment / "bin" / "rlrun"),
            "train",
            "reinforce_cartpole",
            "--frames",
            "500",
            "--set",
            "meta.eval_frequency=500",
            "--set",
            "meta.num_eval_episodes=1",
            "--json",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        env=clean,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "finished"
    assert (work / "runs" / "registry.sqlite").is_file()
    listed = subprocess.run(
        [str(environment / "bin" / "rlrun"), "ls", "--json"],
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
        env=clean,
    )
    assert len(json.loads(listed.stdout)) == 1
