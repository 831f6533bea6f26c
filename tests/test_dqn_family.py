"""DQN's family (issue 40): dueling heads, prioritised replay and n-step returns, all on at once with
Double DQN (as R2D2 uses them), resumed bit for bit after a SIGTERM mid-episode and after a kill -9,
recorded exact; and the settings the family refuses, one line each, exit 2, nothing written.

The memory is small enough to wrap within the run (rows whose frames are overwritten are drawn
again by priority), and every snapshot holds it with its priorities (tests/unit/
test_prioritized_replay.py holds the pieces: the sum tree, the weights, the n-step windows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import builtin_for, fast, invoke, run_attempts
from same_run import (
    assert_same_run,
    final_state,
    killed_after_a_snapshot,
    preempted_mid_episode,
    reference_state,
    resume_ok,
)

pytestmark = pytest.mark.slow  # real trainings in subprocesses

BUDGET = 4000
SPEC = builtin_for("dqn")
FAMILY = ["agent.dueling=true", "agent.n_step=3", "agent.double=true",
          'agent.memory.prioritized={"alpha": 0.6, "beta": 0.4}', "agent.memory.capacity=1500",
          "agent.network.hidden=[32, 32]"]  # fmt: skip
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


@pytest.mark.parametrize(("edits", "hint"), [
    (["agent.n_step=0"], "agent.n_step"),
    (['agent.memory.prioritized={"alpha": 0.6}'], "remove memory.prioritized"),
    (["agent.dueling=true", "agent.network.kind=my_nets:one_too_many"], "agent.dueling asks it for 3 outputs"),
])  # fmt: skip
def test_what_the_family_refuses_is_one_line(edits: list[str], hint: str, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
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
    assert change.reason == "agent.memory.prioritized.beta is tied to max_frame: it would differ at frame 2,000 " \
                            "(0.7 → 0.55)"
    (unchanged,) = check_edit(old, load_spec(SPEC, [*FAMILY, "meta.max_frame=8000"]), 0)
    assert unchanged.allowed
    beta_one = [*FAMILY, 'agent.memory.prioritized={"beta": 1.0}']
    (at_one,) = check_edit(load_spec(SPEC, [*beta_one, "meta.max_frame=4000"]),
                           load_spec(SPEC, [*beta_one, "meta.max_frame=8000"]), 2000)
    assert at_one.allowed
