"""Envs from the user's own code (`env.id = "my_robot.envs:Reach-v0"`), held to the same test as
the envs rlrun ships: a run stopped mid-episode (SIGTERM at an exact frame, kill -9 of its process
group) and resumed equals the uninterrupted run bit for bit (`test_resume.assert_same_run`), its env
restored exactly — Reach-v0 by replaying its episode (it holds an object, so it cannot be copied
attribute by attribute), Push-v0 through the state protocol (`get_rlrun_state`/`set_rlrun_state`).
Both draw from their own generator at every step.

Every command runs as a user would run it: from a project folder that holds the package `my_robot`
(copied from tests/userenvs) and the spec file, with nothing else telling Python where the package
is. The commands start with `python -P -m rlrun`, which, like the `rlrun` script, does not put the
current folder on `sys.path`: rlrun's own search of it is what finds the package.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from same_run import assert_same_run, final_state, train_here, wait_for

from rlrun import snapshot
from rlrun.registry import Registry
from rlrun.spec import builtin_document
from rlrun.testhooks import FREEZE_ENV, SIGNAL_AT_ENV

pytestmark = pytest.mark.slow

USERENVS = Path(__file__).parent / "userenvs"
BUDGET = 4000
STOP_AT = 2345  # mid-episode: the envs' episodes last 150 steps, two copies step together
HOW = {"Reach-v0": "env: replayed", "Push-v0": "env: captured by its set_rlrun_state"}
ISOLATED = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RLRUN_TENSORBOARD": "0"}


def spec_document(env_name: str) -> dict[str, Any]:
    document = builtin_document("ppo_cartpole")
    document["name"] = f"ppo_{env_name.lower().split('-')[0]}"
    document["env"].update(id=f"my_robot.envs:{env_name}", num_envs=2)
    document["agent"].update(n_steps=64, batch_size=64, n_epochs=2)
    document["meta"].update(
        max_frame=BUDGET, eval_frequency=1000, checkpoint_frequency=1000, log_frequency=500, num_eval_episodes=2
    )
    return document


def project(folder: Path) -> Path:
    """A user's project folder: the package, and a spec file for each env."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(USERENVS / "my_robot", folder / "my_robot", ignore=shutil.ignore_patterns("__pycache__"))
    for name in HOW:
        (folder / f"{name.lower().split('-')[0]}.json").write_text(json.dumps(spec_document(name), indent=2))
    return folder


def environment(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RLRUN_HOME", "RLRUN_DB", "DISPLAY", "WAYLAND_DISPLAY")}
    return {**env, "RLRUN_HOME": str(home), **ISOLATED, **(extra or {})}


def command(*args: str) -> list[str]:
    return [sys.executable, "-P", "-m", "rlrun", *args]


def run(
    folder: Path, home: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(*args), cwd=folder, env=environment(home, env), capture_output=True, text=True, timeout=timeout
    )


def spec_file(env_name: str) -> str:
    return f"{env_name.lower().split('-')[0]}.json"


@pytest.fixture(scope="module", params=list(HOW))
def straight(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any]]:
    """The uninterrupted run of each env, trained from its own project folder, in this process
    through the Python API (no signal is under test here: the runs compared with it are the
    commands a user runs, each a process of its own), as a notebook in that folder would."""
    folder = project(tmp_path_factory.mktemp("straight"))
    trained_here(folder, folder / "runs", spec_file(request.param))
    return request.param, final_state(folder / "runs")


def trained_here(folder: Path, home: Path, spec: str, *edits: str) -> None:
    """`rlrun train SPEC --set EDIT...` from the project `folder`, in this process through the Python
    API (`same_run.train_here`), its `sys.path`, current folder and environment put back after."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        patch.syspath_prepend(str(folder))  # sys.path put back after (rlrun's search of the folder adds to it)
        for name, value in ISOLATED.items():
            patch.setenv(name, value)
        done = train_here(home, spec, [arg for edit in edits for arg in ("--set", edit)])
    assert done.code == 0, done.stderr


def _resumed_exactly(home: Path, env_name: str) -> None:
    with Registry.open(home, create=False) as registry:
        resumed = registry.get_run(registry.resolve("latest").id).attempts[-1]
    assert resumed.kind == "resume" and not resumed.approximate, resumed.note
    assert resumed.note is not None and resumed.note.startswith(HOW[env_name]), resumed.note


def test_sigterm_mid_episode_then_resume(straight: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    env_name, a = straight
    folder = project(tmp_path / "project")
    home = folder / "runs"
    stopped = run(folder, home, "train", spec_file(env_name), env={SIGNAL_AT_ENV: str(STOP_AT)})
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    with Registry.open(home, create=False) as registry:
        newest = max(registry.get_run(registry.resolve("latest").id).checkpoints, key=lambda c: c.frame)
    assert newest.kind == "preempt"
    assert all(length > 0 for length in snapshot.read_meta(home / newest.path).episode_length), "not mid-episode"
    resumed = run(folder, home, "resume", "latest")
    assert resumed.returncode == 0, resumed.stderr
    _resumed_exactly(home, env_name)
    assert_same_run(a, final_state(home))


def test_kill_9_then_resume(straight: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    env_name, a = straight
    folder = project(tmp_path / "project")
    home, frozen = folder / "runs", tmp_path / "frozen"
    process = subprocess.Popen(
        command("train", spec_file(env_name)),
        cwd=folder,
        env=environment(home, {FREEZE_ENV: f"{STOP_AT}@{frozen}"}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_for(lambda: frozen.exists() and frozen.read_text(), process)  # the session stopped itself at STOP_AT
    os.killpg(process.pid, signal.SIGKILL)
    assert process.wait(timeout=30) == -signal.SIGKILL
    resumed = run(folder, home, "resume", "latest")
    assert resumed.returncode == 0, resumed.stderr
    _resumed_exactly(home, env_name)
    assert_same_run(a, final_state(home))


def test_enjoy_here_and_from_a_copied_run_folder(tmp_path: Path) -> None:
    folder = project(tmp_path / "project")
    home = folder / "runs"
    trained_here(folder, home, spec_file("Reach-v0"), "meta.max_frame=1000")  # the enjoys are the user's commands
    watched = run(folder, home, "enjoy", "latest", "--episodes", "2", "--json")
    assert watched.returncode == 0, watched.stderr
    played = json.loads(watched.stdout)
    # A run folder copied elsewhere is played where it lies, from the project folder (which holds the module).
    with Registry.open(home, create=False) as registry:
        run_id = registry.resolve("latest").id
    copied = shutil.copytree(home / run_id, tmp_path / "elsewhere" / run_id)
    again = run(folder, tmp_path / "another_home", "enjoy", str(copied), "--episodes", "2", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["episodes"] == played["episodes"]
    # From a folder where the module is not: one line naming the module and the fix, nothing written.
    lost = run(tmp_path, tmp_path / "another_home", "enjoy", str(copied), "--episodes", "2")
    assert lost.returncode == 2, lost.stderr
    assert "Traceback" not in lost.stderr
    errors = [line for line in lost.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot import my_robot.envs" in errors[0] and "PYTHONPATH" in errors[0], lost.stderr


def test_sessions_and_async_copies_in_spawned_processes_find_the_module(tmp_path: Path) -> None:
    folder = project(tmp_path / "project")
    home = folder / "runs"
    done = run(
        folder,
        home,
        "train",
        spec_file("Reach-v0"),
        "--frames",
        "1000",
        "--set",
        "meta.sessions=2",
        "--set",
        "env.vectorization=async",
    )
    assert done.returncode == 0, done.stderr
    with Registry.open(home, create=False) as registry:
        sessions = registry.get_run(registry.resolve("latest").id).sessions
    assert [s.status for s in sessions] == ["finished", "finished"]


def test_a_search_on_a_user_env(tmp_path: Path) -> None:
    folder = project(tmp_path / "project")
    document = spec_document("Reach-v0")
    document["meta"]["max_frame"] = 2000
    document["search"] = {"agent.optimizer.lr": {"loguniform": [1e-4, 3e-3]}}
    (folder / "search.json").write_text(json.dumps(document))
    done = run(folder, folder / "runs", "search", "search.json", "--trials", "2")
    assert done.returncode == 0, done.stderr
    with Registry.open(folder / "runs", create=False) as registry:
        trials = registry.get_search(registry.resolve_search("search:latest").id).trials
        runs = [registry.get_run(t.run_id) for t in trials if t.run_id]
    assert [t.state for t in trials] == ["complete", "complete"]
    assert {r.run.env_id for r in runs} == {"my_robot.envs:Reach-v0"}


# ---------------------------------------------------------------------------------------------
# On a real Ray cluster whose workers have never seen the module


def apart(folder: Path) -> tuple[Path, Path]:
    """The project with its package moved out of the folder the driver runs in, into `code/` (found
    through PYTHONPATH): Ray hands its workers the driver's current folder on `sys.path`, which on
    this one machine would find the package there without shipping it; on a real cluster that path
    is another machine's."""
    code = folder.parent / "code"
    code.mkdir()
    shutil.move(folder / "my_robot", code / "my_robot")
    return folder, code


def on_path(code: Path) -> str:
    return os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(code)]))


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A head that runs no session and one worker node of one CPU, on 127.0.0.1, started from the
    test's own folder (where no `my_robot` lies): only Ray's runtime environment can bring it."""
    pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'rlrun[ray]')")
    os.environ.update(ISOLATED)
    from ray.cluster_utils import Cluster

    made = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        made.add_node(num_cpus=1)
        made.wait_for_nodes()
        yield made
    finally:
        made.shutdown()


def test_on_ray_the_module_reaches_the_workers_and_a_preempted_worker_resumes_exactly(
    straight: tuple[str, dict[str, Any]], cluster: Any, tmp_path: Path
) -> None:
    env_name, a = straight
    if env_name != "Reach-v0":
        pytest.skip("one env is enough on Ray: the worker imports the module the same way for both")
    folder, code = apart(project(tmp_path / "project"))
    home = folder / "runs"
    # The worker SIGTERMs itself mid-episode (a spot notice): Ray runs the task again, which resumes.
    done = run(
        folder,
        home,
        "train",
        spec_file(env_name),
        "--ray",
        cluster.address,
        env={SIGNAL_AT_ENV: str(STOP_AT), "PYTHONPATH": on_path(code)},
        timeout=400,
    )
    assert done.returncode == 0, done.stderr
    with Registry.open(home, create=False) as registry:
        attempts = registry.get_run(registry.resolve("latest").id).attempts
    assert [x.kind for x in attempts] == ["train", "retry"], attempts
    assert not attempts[-1].approximate and (attempts[-1].note or "").startswith(HOW[env_name]), attempts[-1].note
    assert_same_run(a, final_state(home))


def test_on_ray_a_module_the_workers_cannot_import_is_refused_before_anything_is_written(
    cluster: Any, tmp_path: Path
) -> None:
    folder, code = apart(project(tmp_path / "project"))
    # The module imports here: its dependency lies beside it, on this machine only (only the package
    # the spec names is shipped).
    (code / "servo_driver.py").write_text("SPEED = 1\n")
    envs = code / "my_robot" / "envs.py"
    envs.write_text(envs.read_text().replace("import numpy as np\n", "import numpy as np\nimport servo_driver\n"))
    done = run(
        folder,
        folder / "runs",
        "train",
        spec_file("Reach-v0"),
        "--ray",
        cluster.address,
        env={"PYTHONPATH": on_path(code)},
        timeout=400,
    )
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot import my_robot.envs" in errors[0] and "servo_driver" in errors[0], done.stderr
    assert not (folder / "runs").exists() or not any((folder / "runs").iterdir())
