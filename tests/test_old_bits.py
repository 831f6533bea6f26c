"""A run keeps its bits on a later rlrun: each earlier arithmetic revision (`meta.arithmetic`),
trained by today's code, is bit for bit what the last rlrun that trained new runs with it trained.

The older rlrun is taken from this repository's history (`git archive` of the commit, imported
ahead of the installed package) and trains in the same interpreter and virtual environment, so
the two sides differ only by the code. Kernel-independent: both sides run on this machine, where
golden digests of final snapshots would hold only on the CPU that wrote them. A clone without that
history (a shallow one) skips, and says so."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import zygote
from helpers import cli_env
from same_run import assert_same_run, final_state

pytestmark = pytest.mark.slow  # real trainings in subprocesses

ROOT = Path(__file__).resolve().parents[1]

LAST_OF_REVISION = {
    1: "498a604536f1127f39b483c9a25c1c460080e7b2",  # the last rlrun before `meta.arithmetic` existed
    2: "06d0a2349661854cff3f14010a427f3574566fca",  # the last rlrun whose new runs took revision 2
    3: "e2a01083ed4d6cbd2d9cbff13030192328a24f7f",  # the last rlrun whose new runs took revision 3
}

CASES = [  # (revision, built-in, frames, edits): where each revision changed something, and trains it
    # 500 updates (learning starts at 100), each on a batch of 64
    (1, "sac_pendulum", 600, ["agent.batch_size=64"]),
    # one rollout of 8 x 32 frames, its 4 epochs, then one evaluation of one game (later edits win)
    (1, "ppo_breakout", 256, ["agent.n_steps=32", "meta.eval_frequency=256", "meta.num_eval_episodes=1"]),
    (2, "sac_pendulum", 600, ["agent.batch_size=64"]),
    (2, "ppo_breakout", 256, ["agent.n_steps=32", "meta.eval_frequency=256", "meta.num_eval_episodes=1"]),
    # gSDE's SAC (revision 4 trains its features through the noise): 10 rounds of 32 updates on 64
    # rows, then one evaluation of one 999-step episode
    (
        3,
        "sac_mountaincar_continuous",
        320,
        ["agent.batch_size=64", "meta.eval_frequency=320", "meta.num_eval_episodes=1"],
    ),
]


@pytest.fixture(scope="module")
def old_rlrun(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Each revision's last rlrun, unpacked from the history: {revision: folder to import it from}."""
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and this repository's history")
    unpacked = {}
    for revision, commit in LAST_OF_REVISION.items():
        present = subprocess.run([git, "cat-file", "-e", f"{commit}^{{commit}}"], cwd=ROOT, capture_output=True)
        if present.returncode != 0:
            pytest.skip(f"commit {commit[:7]} is not in this clone (a shallow clone?)")
        folder = tmp_path_factory.mktemp(f"rlrun-{commit[:7]}")
        archive = folder / "source.tar"
        subprocess.run([git, "archive", "--output", str(archive), commit, "rlrun", "migrations"], cwd=ROOT, check=True)
        with tarfile.open(archive) as tar:
            tar.extractall(folder, filter="data")
        _assert_imported_from(folder)
        unpacked[revision] = folder
    return unpacked


def _older(source: Path, env: dict[str, str]) -> dict[str, str]:
    """`env` with the rlrun unpacked at `source` imported ahead of the installed one."""
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(source), env.get("PYTHONPATH")]))}


def _assert_imported_from(source: Path) -> None:
    """A process given `_older(source, ...)` runs the old code, not the installed one (checked once per
    revision: a fresh interpreter importing rlrun costs a second or two)."""
    imported = subprocess.run(
        [sys.executable, "-c", "import rlrun; print(rlrun.__file__)"],
        env=_older(source, dict(os.environ)),
        cwd=source,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(imported.stdout.strip()).is_relative_to(source)


def _train(home: Path, spec: str, frames: int, *edits: str, source: Path | None = None) -> None:
    """`rlrun train` with a short cadence, by the rlrun unpacked at `source` (a fresh interpreter,
    importing it from there), or by today's (forked from tests/zygote.py, which has imported it
    already: the same interpreter and libraries, without paying for their import again)."""
    settings = [
        f"meta.max_frame={frames}",
        "meta.seed=3",
        f"meta.eval_frequency={frames // 2}",
        "meta.num_eval_episodes=2",
        f"meta.log_frequency={frames // 4}",
        *edits,
    ]
    argv = ["train", spec, *(a for s in settings for a in ("--set", s))]
    if source is None:
        done = zygote.run(argv, cli_env(home), timeout=600)
    else:
        done = subprocess.run(
            [sys.executable, "-m", "rlrun", *argv],
            env=_older(source, cli_env(home)),
            cwd=source,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize(("revision", "spec", "frames", "edits"), CASES, ids=[f"{r}-{s}" for r, s, _, _ in CASES])
def test_an_earlier_revision_trains_the_bits_its_last_rlrun_trained(
    old_rlrun: dict[int, Path], tmp_path: Path, revision: int, spec: str, frames: int, edits: list[str]
) -> None:
    old_home, new_home = tmp_path / "old", tmp_path / "new"
    _train(old_home, spec, frames, *edits, source=old_rlrun[revision])
    _train(new_home, spec, frames, *edits, f"meta.arithmetic={revision}")
    assert_same_run(final_state(old_home), final_state(new_home))
