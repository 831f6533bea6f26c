"""Rough edges, second pass (issue 53): the answer on stdout and the talk on stderr, through a real
pipe; hints that keep the context they were given; spec errors that name the key; bundles that
keep the umask's mode. No training: a registry row written directly stands for a run."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import cli_env, invoke

from rlrun.registry import Registry


def fake_run(home: Path, run_id: str = "a1b2c3d4e5", name: str = "piped") -> str:
    """A run in `home`'s registry, as `rlrun ls` and `show` read it (no folder, no training)."""
    with Registry.open(home) as registry:
        registry.create_run(
            run_id=run_id,
            name=name,
            spec_name="reinforce_cartpole",
            algorithm="reinforce",
            env_id="CartPole-v1",
            max_frame=3000,
            seed=1,
            num_sessions=1,
            spec_json=json.dumps({"name": "reinforce_cartpole"}),
            host="box",
            pid=1,
        )
    return run_id


def test_ls_through_a_real_pipe_finds_the_run_and_stderr_holds_no_table(tmp_path: Path) -> None:
    home = tmp_path / "runs"
    run_id = fake_run(home)
    errors = tmp_path / "stderr.txt"
    done = subprocess.run(
        f"{sys.executable} -m rlrun ls 2> {errors} | grep piped",
        shell=True,
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert run_id in done.stdout and "reinforce_cartpole" in done.stdout
    assert errors.read_text() == ""  # the table went down the pipe, nothing beside it
    shown = subprocess.run(
        f"{sys.executable} -m rlrun show piped | grep -c sessions",
        shell=True,
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0 and int(shown.stdout) >= 1, shown.stdout + shown.stderr
    assert "→ run" in shown.stderr and "sessions" not in shown.stderr  # which run: a note; the detail: stdout


def test_a_blocks_check_names_the_key_not_the_whole_block() -> None:
    from rlrun.errors import SpecError
    from rlrun.spec import builtin_document, validate_spec

    document = builtin_document("ppo_lstm_cartpole_novel")
    document["agent"].update(batch_size=100, n_steps=32)
    with pytest.raises(SpecError) as refused:
        validate_spec(document)
    assert str(refused.value).startswith(
        "agent.batch_size = 100: is not a multiple of agent.n_steps (32); with a memory each minibatch is whole"
    ), str(refused.value)
    assert "algorithm" not in str(refused.value)  # not the agent block, key by key


def test_a_resume_that_switches_the_algorithm_says_so_rather_than_an_unknown_key() -> None:
    from rlrun.errors import BadInput
    from rlrun.spec import load_spec
    from rlrun.training.api import _edited_spec

    previous = load_spec("reinforce_cartpole")
    with pytest.raises(BadInput) as refused:
        _edited_spec(previous, "a1b2c3d4e5", frames=None, more=None, spec=None, overrides=["agent.algorithm=ppo"])
    said = str(refused.value)
    assert said.startswith('agent.algorithm = "ppo": run a1b2c3d4e5 trains reinforce, and its algorithm cannot'), said
    assert "unknown key" not in said and "`rlrun spec show ppo_cartpole`" in said


def test_a_pushed_bundle_keeps_the_umasks_mode(tmp_path: Path) -> None:
    from rlrun.home.bundle import _Target

    before = os.umask(0o022)
    try:
        target = _Target.of(str(tmp_path / "run.rlrun"), "a1b2c3d4e5")
        with target.writing() as file:
            file.write(b"bundle")
    finally:
        os.umask(before)
    assert stat.S_IMODE((tmp_path / "run.rlrun").stat().st_mode) == 0o644  # as `cp` or `tar` would make it


def test_every_hint_carries_the_home_it_was_given(tmp_path: Path) -> None:
    home, empty = tmp_path / "other", tmp_path / "empty"
    run_id = fake_run(home)
    missing = invoke(None, "show", "zzz", "--home", str(home))
    assert missing.stderr == f"error: no run matches 'zzz'; see `rlrun ls --home {home}`\n"
    stopped = invoke(None, "stop", "piped", "--home", str(home))
    assert f"continue it with `rlrun resume {run_id} --home {home}`" in stopped.stderr, stopped.stderr
    fresh = invoke(None, "ls", "--home", str(empty))
    assert fresh.stderr.endswith(f"start one with `rlrun train reinforce_cartpole --home {empty}`\n")
    # from $RLRUN_HOME the next command finds the home by itself: nothing added
    assert invoke(empty, "ls").stderr.endswith("start one with `rlrun train reinforce_cartpole`\n")
    # what the next command is given is its own
    assert invoke(None, "show", "zzz", "--home", str(home)).stderr.count("--home") == 1


def test_suggest_leaves_a_given_option_and_commands_without_a_home_alone() -> None:
    from rlrun.cli import hints

    with hints.context():
        hints.given("--home", "my runs")
        assert hints.suggest("rlrun show a1") == "rlrun show a1 --home 'my runs'"
        assert hints.suggest("rlrun show a1 --home x") == "rlrun show a1 --home x"
        assert hints.suggest("rlrun spec show ppo_cartpole") == "rlrun spec show ppo_cartpole"
        assert hints.in_context("see `rlrun ls` or `rlrun stop`") == (
            "see `rlrun ls --home 'my runs'` or `rlrun stop --home 'my runs'`"
        )
    assert hints.suggest("rlrun show a1") == "rlrun show a1"  # the command's context ends with it


def test_stopping_a_detached_search_suggests_resuming_it_detached(tmp_path: Path) -> None:
    """A search a cluster actor drives (its row names the actor, as `DetachedSearchDriver` records
    it) is continued detached again, as a detached run is; once a command has taken it over, plain."""
    home = tmp_path / "runs"
    with Registry.open(home) as registry:
        search_id = registry.create_search(
            search_id="sd00000001",
            name=None,
            spec_name="reinforce_cartpole",
            spec_json="{}",
            space_json="{}",
            settings_json=json.dumps({"trials": 2, "metric": "eval_mean"}),
            host="box",
            pid=1,
        ).id
        registry.reopen_search(search_id, host="node", pid=2, driver="actor rlrun/rlrun-search-sd00000001-a1 on node 1")
    stopped = invoke(None, "stop", f"search:{search_id}", "--home", str(home))
    assert stopped.code == 0, stopped.stderr
    assert f"continue it with `rlrun resume search:{search_id} --ray --detach --home {home}`" in stopped.stderr
    with Registry.open(home) as registry:
        registry.reopen_search(search_id, host="box", pid=3)  # `rlrun resume search:` in a terminal
        assert registry.resolve_search(f"search:{search_id}").driver is None
    again = invoke(None, "stop", f"search:{search_id}", "--home", str(home))
    assert f"continue it with `rlrun resume search:{search_id} --home {home}`" in again.stderr, again.stderr
    with Registry.open(home) as registry:  # a SLURM job drives it (`rlrun search --slurm`): submitted again
        registry.reopen_search(search_id, host="node", pid=4, driver="slurm job 42")
    on_slurm = invoke(None, "stop", f"search:{search_id}", "--home", str(home))
    assert f"continue it with `rlrun resume search:{search_id} --slurm --home {home}`" in on_slurm.stderr
