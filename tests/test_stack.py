"""The software a run ran on is part of its record (issue 56): which versions a run's env makes
count (`rlrun.session.stack.software_stack`: by the env id and `env.packages`, never by what is installed),
`versions.json`, and a resume under another torch (faked: `RLRUN_TEST_FAKE_VERSIONS`) recorded
approximate with the change as its reason, as `rlrun show` says (with the software on its session
lines); `compare --gate` does not call bit-equal runs on two stacks identical. A resume on the same
stack stays exact: the resume tests (tests/test_resume.py) compare it bit for bit."""

from __future__ import annotations

import importlib.metadata
import platform
from pathlib import Path

import pytest
from helpers import builtin_for, invoke
from same_run import CADENCE, train

from rlrun import snapshot
from rlrun.registry import Registry
from rlrun.session import stack
from rlrun.testhooks import FAKE_VERSIONS_ENV

TORCH = importlib.metadata.version("torch")


def test_the_env_decides_which_packages_count(monkeypatch: pytest.MonkeyPatch) -> None:
    base = {"python", "torch", "numpy", "gymnasium"}
    assert set(stack.software_stack("CartPole-v1")) == base
    assert set(stack.software_stack("ALE/Pong-v5")) == base | {"ale-py", "opencv-python-headless"}
    assert set(stack.software_stack("HalfCheetah-v5")) == base | {"mujoco"}
    assert set(stack.software_stack("LunarLander-v3")) == base | {"Box2D"}
    cartpole = stack.software_stack("CartPole-v1", device="cpu")
    assert cartpole["python"] == platform.python_version() and cartpole["torch"] == TORCH
    # the user's env module: its distribution's version, or "local" for code no distribution holds
    assert stack.software_stack("my_robot.envs:Reach-v0")["my_robot"] == "local"
    from rlrun.spec import load_spec

    spec = load_spec("ppo_cartpole", ['env.packages=["numpy.random"]'])
    assert stack.software_stack(spec)["numpy"] == stack.software_stack(spec.env)["numpy"] == cartpole["numpy"]
    monkeypatch.setenv(FAKE_VERSIONS_ENV, "torch=2.14.0,numpy=9.9")
    faked = stack.software_stack("CartPole-v1")
    assert (faked["torch"], faked["numpy"]) == ("2.14.0", "9.9")
    assert (
        stack.stack_change(cartpole, faked)
        == f"software changed: torch {TORCH} → 2.14.0, numpy {cartpole['numpy']} → 9.9"
    )
    assert stack.stack_change(cartpole, cartpole) is None
    assert stack.stack_change(None, faked) is None  # an older snapshot names no stack


def test_versions_json_holds_the_stack(tmp_path: Path) -> None:
    versions = stack.software_stack("ALE/Pong-v5")
    written = stack.write_versions(tmp_path, versions)
    assert written == tmp_path / "versions.json"
    assert stack.read_versions(written) == versions
    assert written.read_bytes() == stack.versions_bytes(dict(reversed(versions.items())))  # sorted: the same bytes


def test_a_resume_under_another_torch_is_approximate_and_show_says_why(tmp_path: Path) -> None:
    home, spec = tmp_path / "runs", builtin_for("reinforce")
    assert train(home, spec, "--frames", "1000").code == 0
    resumed = invoke(home, "resume", "--frames", "2000", env={FAKE_VERSIONS_ENV: "torch=2.14.0"})
    assert resumed.code == 0, resumed.stderr
    with Registry.open(home, create=False) as registry:
        detail = registry.get_run(registry.resolve("latest").id)
    first, moved = detail.attempts
    assert not first.approximate and moved.approximate
    assert f"software changed: torch {TORCH} → 2.14.0" in (moved.note or ""), moved.note
    final = max(detail.checkpoints, key=lambda c: c.frame)
    assert snapshot.read_meta(home / final.path).stack == {**stack.software_stack(spec), "torch": "2.14.0"}
    shown = invoke(home, "show", "latest")
    assert shown.code == 0 and f"torch {TORCH} → 2.14.0" in shown.stdout.replace("\n", " "), shown.stdout
    assert f"software: {stack.describe(snapshot.read_meta(home / final.path).stack or {})}" in shown.stdout
    software = invoke(home, "show", "latest", "--json").json()["software"]
    assert software == [{"session": 0, "stack": snapshot.read_meta(home / final.path).stack}]


def test_bit_equal_runs_on_other_software_are_not_identical_and_say_why(tmp_path: Path) -> None:
    """Twins (one spec, one seed), the second trained under a faked torch: their bits are equal,
    and `compare --gate`'s judge does not call them identical; it says which software differs."""
    from rlrun.compare import identity, runs

    home = tmp_path / "runs"
    twin = ["reinforce_cartpole", "--frames", "1000", *CADENCE]
    assert invoke(home, "train", *twin, "--name", "old").code == 0
    assert invoke(home, "train", *twin, "--name", "new", env={FAKE_VERSIONS_ENV: "torch=2.14.0"}).code == 0
    old, new = (runs.find([name], home=home).runs for name in ("old", "new"))
    assert identity.fingerprints(new) == identity.fingerprints(old)  # the same bits
    same, why_not = identity.judge(new, old)
    assert not same and not identity.identical(new, old)
    assert f"their bits are equal, but software changed: torch {TORCH} → 2.14.0" in (why_not or "")
