"""`rlrun import sb3` on folders the real RL Zoo wrote (issue 55): two seeds of the zoo's PPO on
CartPole, trained here at a tiny budget by `rl_zoo3.train` in a process of its own, imported as
foreign runs and compared with a tiny rlrun run of two sessions. The SB3 group's numbers are held to
the zoo's evaluations.npz, read here with numpy; the refusals and the bad input to one line, exit 2,
nothing written."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import heavy_modules, invoke

from rlrun.registry import Registry

pytestmark = pytest.mark.slow  # trains

# Looked for, not imported: importing rl_zoo3 patches Gymnasium's TimeLimit for the whole process (its
# gym_patches), which would change every later test's envs in this pytest worker.
if importlib.util.find_spec("rl_zoo3") is None:
    pytest.skip("the zoo's own trainer writes the folders imported (the test extra)", allow_module_level=True)
pytest.importorskip("rliable", reason="rlrun compare needs the compare extra")

# Two seeds in one process: the zoo's imports (torch, SB3, optuna) once. 1,024 frames of the zoo's
# PPO on CartPole (8 env copies x 32 steps a rollout), an evaluation every 256 frames.
ZOO = """
import sys
from rl_zoo3.train import train
logs = sys.argv[1]
for seed in ("7", "8"):
    sys.argv = ["train", "--algo", "ppo", "--env", "CartPole-v1", "-n", "1024", "--eval-freq", "256",
                "--eval-episodes", "2", "--n-eval-envs", "1", "--seed", seed, "-f", logs,
                "--device", "cpu", "--num-threads", "1", "--verbose", "0", "--log-interval", "-1"]
    train()
"""
SHORT = ["--frames", "1024", "--sessions", "2", "--set", "meta.eval_frequency=256", "--set", "meta.num_eval_episodes=2"]
SHORT += ["--set", "meta.checkpoint_frequency=512", "--set", "meta.log_frequency=512"]


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The zoo's log folder (two runs of ppo on CartPole-v1) and a home holding them, imported,
    beside an rlrun run of ppo_cartpole (two sessions)."""
    root = tmp_path_factory.mktemp("zoo")
    logs, home = root / "logs", root / "runs"
    trained = subprocess.run(
        [sys.executable, "-c", ZOO, str(logs)], capture_output=True, text=True, timeout=300, cwd=root, check=False
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    done = invoke(home, "train", "ppo_cartpole", "--name", "ours", *SHORT)
    assert done.code == 0, done.stderr
    imported = invoke(home, "import", "sb3", str(logs))
    assert imported.code == 0, imported.stderr
    assert imported.stderr.count("imported run") == 2, imported.stderr
    return logs, home


def _final_means(logs: Path) -> list[float]:
    """Each zoo run's last evaluation mean, from its evaluations.npz."""
    files = sorted((logs / "ppo").glob("CartPole-v1_*/evaluations.npz"))
    return [float(np.load(npz)["results"][-1].mean()) for npz in files]


def _names(home: Path) -> list[str]:
    """The imported runs' names, in the zoo's folder order (CartPole-v1_1, CartPole-v1_2)."""
    with Registry.open(home, create=False) as registry:
        return sorted(r.name for r in registry.list_runs(limit=None) if r.name and r.name.startswith("sb3-"))


def _run_count(home: Path) -> int:
    with Registry.open(home, create=False) as registry:
        return registry.count_runs()


def test_imported_zoo_runs_compare_against_rlrun(zoo: tuple[Path, Path]) -> None:
    logs, home = zoo
    done = invoke(home, "compare", "ours", *_names(home), "--reps", "200", "--json")
    assert done.code == 0, done.stderr
    result = json.loads(done.stdout)
    groups = {group["name"]: group for group in result["groups"]}
    assert set(groups) == {"ppo_cartpole", "sb3:ppo"} and groups["sb3:ppo"]["seeds"] == 2
    # The IQM of two scores is their mean: the zoo's final evaluations, exactly as it wrote them.
    assert groups["sb3:ppo"]["iqm"] == pytest.approx(np.mean(_final_means(logs)), rel=1e-12)
    (improvement,) = result["improvement"]
    assert {improvement["a"], improvement["b"]} == {"ppo_cartpole", "sb3:ppo"}
    assert 0.0 <= improvement["probability"] <= 1.0


def test_import_again_is_nothing_to_do_and_loads_no_torch(zoo: tuple[Path, Path]) -> None:
    logs, home = zoo
    before = _run_count(home)
    again = invoke(home, "import", "sb3", str(logs / "ppo"))
    assert again.code == 0 and again.stderr.count("nothing to do") == 2, again.stderr
    assert _run_count(home) == before
    shown = invoke(home, "show", _names(home)[0])
    assert shown.code == 0 and "foreign: imported from a Stable-Baselines3 / RL Zoo log folder" in shown.stdout
    assert heavy_modules(home, "import", "sb3", str(logs)).split(",").count("torch") == 0


def test_a_rebuilt_registry_keeps_the_foreign_runs_evaluations(zoo: tuple[Path, Path], tmp_path: Path) -> None:
    _, home = zoo
    copy = tmp_path / "runs"
    shutil.copytree(home, copy)
    with Registry.open(copy, create=False) as registry:
        run = registry.resolve(_names(copy)[1])
        kept = registry.get_run(run.id).evaluations
    for file in copy.glob("registry.sqlite*"):
        file.unlink()
    rebuilt = invoke(copy, "db", "rebuild")
    assert rebuilt.code == 0, rebuilt.stderr
    with Registry.open(copy, create=False) as registry:
        again = registry.get_run(run.id)
    assert again.run.origin == "sb3"
    assert [e._replace(id=0, session_id=0) for e in again.evaluations] == [e._replace(id=0, session_id=0) for e in kept]


@pytest.mark.parametrize("command", [["resume"], ["enjoy"], ["export", "--metrics"], ["push", "{dest}"]])
def test_commands_that_need_a_snapshot_refuse_a_foreign_run(
    zoo: tuple[Path, Path], command: list[str], tmp_path: Path
) -> None:
    _, home = zoo
    verb, *rest = command
    done = invoke(home, verb, _names(home)[0], *[a.format(dest=tmp_path / "bundle") for a in rest])
    assert done.code == 2, (done.stdout, done.stderr)
    line = done.stderr.strip().splitlines()[-1]
    assert "imported from a Stable-Baselines3 / RL Zoo log folder" in line and f"`rlrun {verb}`" in line
    assert not (tmp_path / "bundle").exists()


def _broken(logs: Path, where: Path, how: str) -> Path:
    run = where / "ppo" / "CartPole-v1_9"
    shutil.copytree(logs / "ppo" / "CartPole-v1_1", run)
    if how == "no evaluations":
        (run / "evaluations.npz").unlink()
    else:
        args = run / "CartPole-v1" / "args.yml"
        args.write_text(args.read_text().replace("- CartPole-v1\n", "- NoSuchEnv-v0\n"))
    return where


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("no evaluations", "evaluations.npz: missing"),
        ("unknown env", "env 'NoSuchEnv-v0' is not a Gymnasium environment known here"),
        ("not a zoo folder", "not an RL Zoo log folder"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(zoo: tuple[Path, Path], tmp_path: Path, how: str, said: str) -> None:
    logs, home = zoo
    source = tmp_path if how == "not a zoo folder" else _broken(logs, tmp_path, how)
    before = _run_count(home)
    done = invoke(home, "import", "sb3", str(source))
    assert done.code == 2, done.stderr
    assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert _run_count(home) == before
