"""DQN's family (issue 40): dueling heads, prioritised replay and n-step returns, all on at once with
Double DQN (as R2D2 uses them), resumed bit for bit after a SIGTERM mid-episode and after a kill -9,
recorded exact; and the settings the family refuses, one line each, exit 2, nothing written.

The memory is small enough to wrap within the run (rows whose frames are overwritten are drawn
again by priority), and every snapshot holds it with its priorities (tests/unit/
test_prioritized_replay.py holds the pieces: the sum tree, the weights, the n-step windows).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
from helpers import builtin_for, cli_env, environment, fast, invoke, run_attempts
from same_run import (
    assert_same_run,
    final_state,
    killed_after_a_snapshot,
    preempted_mid_episode,
    reference_state,
    resume_ok,
    train_here,
)

pytestmark = pytest.mark.slow  # real trainings in subprocesses

BUDGET = 4000
SPEC = builtin_for("dqn")
FAMILY = [
    "agent.dueling=true",
    "agent.n_step=3",
    "agent.double=true",
    'agent.memory.prioritized={"alpha": 0.6, "beta": 0.4}',
    "agent.memory.capacity=1500",
    "agent.network.hidden=[32, 32]",
]
ARGS = [*fast(SPEC), *(arg for edit in FAMILY for arg in ("--set", edit)), "--frames", str(BUDGET)]
USERNETS = Path(__file__).parent / "usernets"


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The uninterrupted run, trained once per test run (`reference_state`)."""
    return reference_state(tmp_path_factory, SPEC, *ARGS)


def _assert_recorded_exact(home: Path) -> None:
    attempts = run_attempts(home)
    assert [a.kind for a in attempts] == ["train", "resume"]
    assert not attempts[-1].approximate, attempts[-1].note


def test_sigterm_mid_episode_resumes_the_family_bit_for_bit(straight: dict[str, Any], home: Path) -> None:
    preempted_mid_episode(home, SPEC, *ARGS)
    resume_ok(home)
    _assert_recorded_exact(home)
    a, b = straight, final_state(home)
    assert_same_run(a, b)
    memory = b["sessions"][0]["saved"].tensors["agent"]["memory"]
    assert memory["included"] and memory["rows_end"] > 1500, "the memory did not wrap"
    assert len(set(memory["priorities"].tolist())) > 2, "no priority was ever set from a TD error"


def test_kill_9_after_a_snapshot_resumes_the_family_bit_for_bit(straight: dict[str, Any], home: Path) -> None:
    killed_after_a_snapshot(home, SPEC, *ARGS)
    resume_ok(home, "latest")
    _assert_recorded_exact(home)
    assert_same_run(straight, final_state(home))


@pytest.mark.parametrize(
    ("edits", "hint"),
    [
        (["agent.n_step=0"], "agent.n_step"),
        (
            ['agent.memory.prioritized={"alpha": 0.6}'],
            'agent.memory.prioritized = {"alpha": 0.6}: sac\'s replay memory draws uniformly: remove it',
        ),
        (["agent.dueling=true", "agent.network.kind=my_nets:one_too_many"], "agent.dueling asks it for 3 outputs"),
    ],
)
def test_what_the_family_refuses_is_one_line(
    edits: list[str], hint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(USERNETS))
    home = tmp_path / "runs"
    spec = builtin_for("sac") if "prioritized" in edits[0] else SPEC
    done = invoke(home, "train", spec, "--frames", "1000", *(arg for edit in edits for arg in ("--set", edit)))
    assert done.code == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and hint in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    assert not home.exists()


def test_a_longer_budget_is_refused_once_beta_has_annealed(tmp_path: Path) -> None:
    """β anneals to 1 at max_frame: a longer budget would have weighed every sample learnt from so
    far differently, so `resume --frames` refuses it (one line), like a schedule tied to max_frame."""
    from rlrun.spec import load_spec
    from rlrun.spec.consistency import check_edit

    old = load_spec(SPEC, [*FAMILY, "meta.max_frame=4000"])
    (change,) = check_edit(old, load_spec(SPEC, [*FAMILY, "meta.max_frame=8000"]), 2000)
    assert not change.allowed
    assert (
        change.reason == "agent.memory.prioritized.beta is tied to max_frame: it would differ at frame 2,000 "
        "(0.7 → 0.55)"
    )
    (unchanged,) = check_edit(old, load_spec(SPEC, [*FAMILY, "meta.max_frame=8000"]), 0)
    assert unchanged.allowed
    beta_one = [*FAMILY, 'agent.memory.prioritized={"beta": 1.0}']
    (at_one,) = check_edit(
        load_spec(SPEC, [*beta_one, "meta.max_frame=4000"]), load_spec(SPEC, [*beta_one, "meta.max_frame=8000"]), 2000
    )
    assert at_one.allowed


ROOT = Path(__file__).resolve().parents[1]
BEFORE_THE_FAMILY = "29ddb8f58a2854906fb04a20db0e43892c7b6c42"
"""The last rlrun without DQN's family (tests/test_old_bits.py holds the arithmetic revisions, not DQN)."""


def test_a_dqn_without_the_family_trains_as_before_it(tmp_path: Path) -> None:
    """A spec without the new keys (uniform replay, one-step targets, the kernel's learner) keeps
    its bits: trained by the rlrun before the family and by today's, the same run."""
    git = shutil.which("git")
    present = (
        git
        and subprocess.run(
            [git, "cat-file", "-e", f"{BEFORE_THE_FAMILY}^{{commit}}"], cwd=ROOT, capture_output=True
        ).returncode
        == 0
    )
    if not present:
        pytest.skip(f"needs git and commit {BEFORE_THE_FAMILY[:7]} of this repository's history")
    assert git is not None
    source, archive = tmp_path / "before", tmp_path / "before.tar"
    subprocess.run(
        [git, "archive", "--output", str(archive), BEFORE_THE_FAMILY, "rlrun", "migrations"], cwd=ROOT, check=True
    )
    with tarfile.open(archive) as tar:
        tar.extractall(source, filter="data")
    settings = [
        "meta.max_frame=2000",
        "meta.seed=3",
        "meta.eval_frequency=1000",
        "meta.num_eval_episodes=2",
        "meta.log_frequency=500",
        *fast(SPEC)[1::2],
        "agent.double=true",
    ]
    argv = [arg for edit in settings for arg in ("--set", edit)]
    old, new = tmp_path / "old" / "runs", tmp_path / "new" / "runs"
    env = {**cli_env(old), "PYTHONPATH": os.pathsep.join(filter(None, [str(source), os.environ.get("PYTHONPATH")]))}
    imported = subprocess.run(
        [sys.executable, "-c", "import rlrun; print(rlrun.__file__)"],
        env=env,
        cwd=source,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(imported.stdout.strip()).is_relative_to(source)  # the old code, not the installed one
    done = subprocess.run(
        [sys.executable, "-m", "rlrun", "train", SPEC, *argv],
        env=env,
        cwd=source,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert train_here(new, SPEC, argv).code == 0
    with environment(old):
        before = final_state(old)
    with environment(new):
        assert_same_run(before, final_state(new))
