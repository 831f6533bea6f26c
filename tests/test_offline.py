"""Learning from a dataset (issue 54): `data` in a spec, `meta.offline_updates` gradient steps on it
counted as frames, then online. One dataset, made once by bc_cartpole's recipe (a tiny
reinforce_cartpole run, then `record`), serves every test. A session SIGKILLed right after its
snapshot mid-offline, at the switch and mid-online resumes to the uninterrupted run's final
snapshot bit for bit, and the attempt is recorded exact; a dataset whose files changed is refused at
resume; each bad input is one line, exit 2, nothing written."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import Result, invoke, run_attempts, run_cli
from same_run import CADENCE, assert_same_run, final_state

from rlrun.testhooks import CRASH_ENV

pytestmark = pytest.mark.slow  # real trainings

minari = pytest.importorskip("minari", reason="learning from a dataset needs the minari extra")

SPEC = "bc_cartpole"
DATASET = "rlrun/cartpole-reinforce-medium-v0"  # bc_cartpole's
SETTINGS = [
    *CADENCE,  # a snapshot and an evaluation every 1k
    "--frames",
    "3500",
    "--set",
    "meta.offline_updates=2000",  # snapshots at 1k (offline), 2k (the switch), 3k (online), 3.5k
    "--set",
    "data.recipe.frames=2000",
    "--set",
    "data.recipe.episodes=5",
    "--set",
    "data.recipe.epsilon=0.2",  # D4RL's "medium" recipe: ε-random actions beside the sampled ones
]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This module's datasets folder, `MINARI_DATASETS_PATH` for every command it runs."""
    folder = tmp_path_factory.mktemp("datasets")
    saved = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(folder)
    yield folder
    if saved is None:
        os.environ.pop("MINARI_DATASETS_PATH")
    else:
        os.environ["MINARI_DATASETS_PATH"] = saved


@pytest.fixture(scope="module")
def straight(datasets: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted run (its recipe records the dataset first)."""
    home = tmp_path_factory.mktemp("straight") / "runs"
    done = run_cli(home, "train", SPEC, *SETTINGS)
    assert done.code == 0, done.stderr
    assert (datasets / DATASET / "data").is_dir(), "the recipe recorded the dataset"
    assert minari.load_dataset(DATASET).storage.metadata["rlrun"]["epsilon"] == 0.2, "as the recipe says"
    return home


def test_the_dataset_keeps_its_recipe_outside_the_pinned_digest(straight: Path, datasets: Path, tmp_path: Path) -> None:
    from rlrun import data

    folder = datasets / DATASET
    kept = json.loads((folder / data.RECIPE).read_text())
    assert kept == {
        "spec": "reinforce_cartpole",
        "frames": 2000,
        "episodes": 5,
        "stochastic": True,
        "epsilon": 0.2,
        "noise": None,
        "replay": False,
    }
    pinned = json.loads(invoke(straight, "show", "latest", "--spec-json").stdout)["data"]["sha256"]
    bare = tmp_path / "bare"
    shutil.copytree(folder, bare, ignore=shutil.ignore_patterns(data.RECIPE))
    assert data.digest(bare) == pinned == data.digest(folder), "the data's digest, the recipe left out"
    assert not list(datasets.glob(".rlrun-recipe-*")), "its scratch folder is gone"


@pytest.mark.parametrize(("snapshots", "where"), [(1, "mid-offline"), (2, "at the switch"), (3, "mid-online")])
def test_a_kill_9_resumes_bit_exact(straight: Path, tmp_path: Path, snapshots: int, where: str) -> None:
    home = tmp_path / "runs"
    killed = run_cli(home, "train", SPEC, *SETTINGS, env={CRASH_ENV: f"checkpoint-recorded#{snapshots}"})
    assert killed.code == -signal.SIGKILL, killed.stderr
    [listed] = invoke(home, "ls", "--json").json()  # the phase of the killed run's snapshot frame
    phase = "offline" if snapshots < 2 else "online"
    assert (listed["phase"], listed["offline_updates"], listed["session_frame"]) == (phase, 2000, 1000 * snapshots)
    assert f"/3.5k {phase}" in invoke(home, "ls").stdout
    resumed = invoke(home, "resume", "latest")
    assert resumed.code == 0, resumed.stderr
    attempts = run_attempts(home)
    assert [a.start_frame for a in attempts] == [0, 1000 * snapshots], where
    assert not any(a.approximate for a in attempts), "recorded exact"
    reference = _state(straight)
    assert_same_run(reference, _state(home))
    clock = reference["sessions"][0]["saved"].meta.clock
    assert (clock.frame, clock.opt_step) == (3500, 2000), "2000 gradient steps on the dataset, then 1500 frames"


def test_a_changed_dataset_is_refused_at_resume(straight: Path, datasets: Path, tmp_path: Path) -> None:
    home, changed = tmp_path / "runs", tmp_path / "changed"
    shutil.copytree(straight, home)
    shown = invoke(home, "show", "latest")
    assert "s0 online, 2,000 gradient steps" in shown.stdout, shown.stdout  # its phase, said by `show`
    shutil.copytree(datasets, changed)
    metadata = changed / DATASET / "data" / "metadata.json"
    metadata.write_text(metadata.read_text().replace("episodes", "Episodes", 1))
    before = sorted(p.relative_to(home) for p in home.rglob("*"))
    refused = invoke(home, "resume", "latest", "--more", "500", env={"MINARI_DATASETS_PATH": str(changed)})
    _one_line(refused, "data.dataset", "changed since the run pinned them")
    forked = invoke(home, "resume", "latest", "--fork", "--more", "500", env={"MINARI_DATASETS_PATH": str(changed)})
    _one_line(forked, "data.dataset", "changed since the run pinned them")
    assert sorted(p.relative_to(home) for p in home.rglob("*")) == before, "nothing written"
    assert len(run_attempts(home)) == 1
    assert len(invoke(home, "ls", "--json").json()) == 1, "no fork recorded"


def test_bad_input_is_one_line_and_writes_nothing(
    datasets: Path, straight: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "runs"
    unreadable = tmp_path / "unreadable"
    (unreadable / "data").mkdir(parents=True)
    (unreadable / "data" / "main_data.hdf5").write_text("not HDF5")
    bad = {
        "no such dataset": [
            "--set",
            "data.dataset=rlrun/nothing-v0",
            "--set",
            "data.recipe=null",
        ],  # no recipe to make it
        "the env's are Box(6,)": ["--set", "env.id=Acrobot-v1"],
        "Minari cannot read": ["--set", f"data.dataset={unreadable}"],
        "does not learn from a dataset": ["--set", "agent.algorithm=dqn"],
        "remove it when learning from data": ["--set", "env.normalize={}"],
        "data.recipe.replay": ["--set", "data.recipe.replay=true"],  # beside the settings' epsilon
        "data.recipe.noise": ["--set", "data.recipe.noise=0.1"],
        "made by another recipe (episodes 5, not 6)": ["--set", "data.recipe.episodes=6"],  # the dataset's is kept
    }
    for words, edit in bad.items():
        _one_line(invoke(home, "train", SPEC, *SETTINGS, *edit), words)
    _one_line(invoke(home, "train", "dqn_cartpole", "--set", "meta.offline_updates=10"), "name one in data.dataset")
    lagrange = invoke(home, "train", "cql_cartpole", *SETTINGS, "--set", "agent.lagrange_threshold=1")
    _one_line(lagrange, "agent.lagrange_threshold: CQL-Lagrange", "remove it for a discrete action space")
    monkeypatch.setitem(sys.modules, "minari", None)  # the extra not installed
    _one_line(invoke(home, "train", SPEC, *SETTINGS), "needs the minari extra", "pip install")
    assert not home.exists(), "nothing written"


def _state(home: Path) -> dict[str, Any]:
    from helpers import environment

    with environment(home):
        return final_state(home)


def _one_line(done: Result, *words: str) -> None:
    assert done.code == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    for word in words:
        assert word in done.stderr, done.stderr
