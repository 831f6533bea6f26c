"""Rough edges a new user hit (issue 44), each held by a real run or a real terminal: a crashed run's
progress in `ls`, scores told apart, tables that fit 80 columns, trial runs kept out of the way."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TINY, cli_env, fast, invoke, on_a_terminal, run_cli, search_spec

from rlrun.registry import Registry

pytestmark = pytest.mark.slow
pytest_plugins = ["postgres_server"]  # the `postgres_url` fixture: a registry on a real PostgreSQL server


# ---- a crashed run's progress --------------------------------------------------------------------


def test_ls_counts_a_crashed_runs_progress_up_to_its_newest_snapshot(tmp_path: Path) -> None:
    # Killed (SIGKILL, no cleanup) right after its 2k snapshot is recorded: the last heartbeat is
    # older, and a resume continues from 2k, so 2k of 3k is what was done.
    crashed = run_cli(
        tmp_path,
        "train",
        "reinforce_cartpole",
        *TINY,
        env={"RLRUN_TEST_CRASH_AT": "checkpoint-recorded#2", "RLRUN_TEST_STALE_AFTER_SECONDS": "1"},
    )
    assert crashed.code != 0
    listed = invoke(tmp_path, "ls", "--json").json()[0]
    assert (listed["status"], listed["session_frame"], listed["frames_done"]) == ("crashed", 2000, 2000)
    table = invoke(tmp_path, "ls").stdout
    assert " 2k/3k " in table, table


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_ls_counts_a_heartbeat_beyond_the_newest_snapshot(
    tmp_path: Path, database: str, request: pytest.FixtureRequest
) -> None:
    url = None if database == "sqlite" else request.getfixturevalue("postgres_url")
    with Registry.open(tmp_path, url) as registry:
        run = registry.create_run(
            run_id="a1",
            name=None,
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
        session = registry.get_session(run.id, 0)
        registry.add_checkpoint(session.id, frame=2000, kind="periodic", path="p", sha256="0", size_bytes=1)
        registry.heartbeat(session.id, frame=2500, episode=1, opt_step=1)
        assert registry.list_runs()[0].session_frame == 2500
        registry.add_checkpoint(session.id, frame=3000, kind="final", path="q", sha256="1", size_bytes=1)
        assert registry.list_runs()[0].session_frame == 3000


# ---- 80 columns ----------------------------------------------------------------------------------


def terminal_lines(home: Path, columns: int, *args: str, cwd: Path | None = None) -> list[str]:
    """The lines `rlrun ARGS` writes to stdout and stderr on a pseudo-terminal `columns` wide (`on_a_terminal`)."""
    drawn = on_a_terminal(home, columns, *args, cwd=cwd)
    return [line for line in re.split(r"\r\n|\r|\n", drawn) if line.strip()]


def test_ls_and_show_fit_80_columns_without_splitting_a_word(tmp_path: Path) -> None:
    assert invoke(tmp_path, "train", "reinforce_cartpole", *TINY, "--name", "baseline-run").code == 0
    assert invoke(tmp_path, "resume", "baseline-run", "--frames", "4000").code == 0
    for command in (["ls"], ["show", "baseline-run"]):
        narrow = terminal_lines(tmp_path, 80, *command)
        assert not [line for line in narrow if len(line) > 80], "\n".join(narrow)
        # Off a terminal nothing is cut: every word on the narrow terminal is a whole word there.
        off = invoke(tmp_path, *command)
        whole = set((off.stdout + off.stderr).split())
        assert {word for line in narrow for word in line.split()} <= whole, "\n".join(narrow)
        assert "baseline-run" in narrow[0 if command == ["ls"] else 1] or "baseline-run" in "\n".join(narrow)
    listed = terminal_lines(tmp_path, 80, "ls")
    assert listed[0].split()[:3] == ["#", "id", "name"] and "status" in listed[0] and "best" in listed[0]


def test_the_live_table_keeps_ppos_approx_kl_at_80_columns(tmp_path: Path) -> None:
    drawn = terminal_lines(tmp_path, 80, "train", "ppo_cartpole", *TINY, *fast("ppo_cartpole"))
    header = [line for line in drawn if line.lstrip().startswith("session")][-1]  # once PPO has reported it
    assert "approx_kl" in header.split(), "\n".join(drawn)
    assert not [line for line in drawn if len(line) > 80 or "…" in line], "\n".join(drawn)


def test_enjoys_video_line_is_never_wrapped_inside_the_table(tmp_path: Path) -> None:
    pytest.importorskip("imageio", reason="the video extra is not installed (pip install 'rlrun[video]')")
    home = tmp_path / "home"
    assert invoke(home, "train", "reinforce_cartpole", *TINY).code == 0
    (tmp_path / "videos").mkdir()
    # Wider than the table of returns, narrower than the terminal: one line, as a terminal shows it.
    video = "videos/cartpole-replay-of-the-best-checkpoint.mp4"
    drawn = terminal_lines(home, 80, "enjoy", "--episodes", "2", "--video", video, cwd=tmp_path)
    assert re.fullmatch(rf"video: {video} \(\d+ frames\)", drawn[-1].strip()), "\n".join(drawn)


# ---- trial runs ----------------------------------------------------------------------------------


def test_ls_keeps_a_searchs_trial_runs_behind_a_count_and_trials_shows_them(tmp_path: Path) -> None:
    home = tmp_path / "runs"
    assert invoke(home, "train", "reinforce_cartpole", *TINY, "--name", "mine").code == 0
    searched = invoke(home, "search", str(search_spec(tmp_path)), "--trials", "2", "--pruner", "none")
    assert searched.code == 0, searched.stderr
    listed = invoke(home, "ls").stdout.splitlines()
    # The trials' runs (rows 1 and 2) are counted, not listed; the run that is not a trial keeps its row.
    assert listed[0].split()[:3] == ["#", "id", "name"]
    assert [line.split()[:3] for line in listed[1:-1]] == [["3", invoke(home, "ls", "--json").json()[2]["id"], "mine"]]
    assert listed[-1] == "and 2 trial runs: --trials"
    everything = invoke(home, "ls", "--trials").stdout.splitlines()
    assert [line.split()[0] for line in everything[1:]] == ["1", "2", "3"]
    assert len(invoke(home, "ls", "--json").json()) == 3  # scripts read every run
    assert "(mine)" in invoke(home, "show", "3").stderr.splitlines()[0]
    only_trials = invoke(home, "ls", "--of", "reinforce_cartpole", "-n", "2").stderr
    assert only_trials == "2 trial runs (of searches): --trials\n"


# ---- hints that name the command that does what they say --------------------------------------


def test_stopping_a_detached_run_says_how_to_resume_it_detached(tmp_path: Path) -> None:
    with Registry.open(tmp_path) as registry:
        registry.create_run(
            run_id="d1",
            name="away",
            spec_name="reinforce_cartpole",
            algorithm="reinforce",
            env_id="CartPole-v1",
            max_frame=3000,
            seed=1,
            num_sessions=1,
            spec_json=json.dumps({"name": "reinforce_cartpole"}),
            host=socket.gethostname(),
            pid=os.getpid(),
        )
        assert registry.supervise_run(
            "d1", supervisor="actor rlrun/rlrun-d1 on node 8c1f", host=socket.gethostname(), pid=os.getpid()
        )
    stopped = invoke(tmp_path, "stop", "away")
    assert stopped.code == 0, stopped.stderr
    assert stopped.stderr.rstrip().endswith("continue it with `rlrun resume d1 --ray --detach`"), stopped.stderr


def test_spec_list_lists_the_search_specs_too_marked() -> None:
    listed = invoke(None, "spec", "list").stdout.splitlines()
    assert listed[0].split() == ["spec", "algorithm", "env", "for"]
    rows = {line.split()[0]: line.split()[-1] for line in listed[1:]}
    assert rows["ppo_lunarlander_pbt"] == "search" and rows["ppo_cartpole"] == "train"


def test_plot_without_o_writes_a_file_named_after_the_run_and_says_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib", reason="the plot extra is not installed (pip install 'rlrun[plot]')")
    home = tmp_path / "runs"
    assert invoke(home, "train", "reinforce_cartpole", *TINY, "--name", "first").code == 0
    monkeypatch.chdir(tmp_path)
    drawn = invoke(home, "plot", "first")
    assert drawn.code == 0, drawn.stderr
    assert drawn.stderr.splitlines()[-1] == "wrote first.png"
    assert (tmp_path / "first.png").read_bytes().startswith(b"\x89PNG")


def test_a_mistyped_wrapper_gets_a_did_you_mean(tmp_path: Path) -> None:
    refused = invoke(
        tmp_path,
        "train",
        "reinforce_cartpole",
        *TINY,
        "--set",
        'env.wrappers=["gymnasium.wrappers:RecordEpisodeStatistcs"]',
    )
    assert refused.code == 2
    assert refused.stderr.endswith('did you mean "RecordEpisodeStatistics"?\n'), refused.stderr


def test_switching_the_algorithm_with_set_is_said_first_as_the_switch(tmp_path: Path) -> None:
    refused = invoke(tmp_path, "train", "ppo_cartpole", "--set", "agent.algorithm=dqn")
    assert refused.code == 2
    lines = refused.stderr.splitlines()
    assert lines[0].startswith('error: agent.algorithm = "dqn": switches ppo_cartpole from ppo to dqn'), lines
    assert "n_steps" in lines[0] and "`rlrun spec show dqn_cartpole`" in lines[0]
    assert len(lines) == 1, lines  # not a line per PPO setting DQN lacks


# ---- other libraries keep to themselves; no empty revision rows ---------------------------------


def test_mlflow_does_not_talk_in_rlruns_output(tmp_path: Path) -> None:
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed (pip install 'rlrun[mlflow]')")
    # A new store, so MLflow makes its tables; run from the test's folder, where MLflow puts mlruns/.
    env = {**cli_env(tmp_path / "runs"), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    env.pop("MLFLOW_LOGGING_LEVEL", None)
    done = subprocess.run(
        [sys.executable, "-m", "rlrun", "train", "reinforce_cartpole", *TINY, "--track", "mlflow"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "Creating initial MLflow database tables" not in done.stderr
    assert not [line for line in done.stderr.splitlines() if " INFO mlflow" in line or "alembic" in line], done.stderr


def test_a_plain_resume_adds_no_empty_spec_revision_row(tmp_path: Path) -> None:
    stopped = run_cli(
        tmp_path, "train", "reinforce_cartpole", *TINY, "--name", "again", env={"RLRUN_TEST_SIGNAL_AT_FRAME": "1500"}
    )
    assert stopped.code == 128 + 15, stopped.stderr
    assert invoke(tmp_path, "resume", "again").code == 0
    shown = invoke(tmp_path, "show", "again").stdout
    revisions = shown.split("spec revisions\n")[1].split("\n\n")[0].splitlines()
    assert [row.split()[0] for row in revisions[1:]] == ["0"], shown
    assert "none" not in revisions[-1].split()
    assert "spec: revision 0 (from frame 0)" in shown
    assert len(invoke(tmp_path, "show", "again", "--json").json()["spec_revisions"]) == 2  # still recorded


# ---- where user code is found; run names -------------------------------------------------------

WRAPPER_BESIDE_THE_SPEC = """
import gymnasium as gym


class HalfReward(gym.RewardWrapper):
    def reward(self, reward):
        return 0.5 * reward
"""

NETWORK_BESIDE_THE_SPEC = """
from torch import nn


def tiny(observation_space, outputs):
    return nn.Sequential(nn.Flatten(), nn.Linear(observation_space.shape[0], outputs))
"""


def test_wrappers_and_networks_beside_the_spec_are_found_as_env_modules_are(tmp_path: Path) -> None:
    (tmp_path / "beside_wrappers.py").write_text(WRAPPER_BESIDE_THE_SPEC)
    (tmp_path / "beside_nets.py").write_text(NETWORK_BESIDE_THE_SPEC)
    env = cli_env(tmp_path / "runs")
    env.pop("PYTHONPATH", None)  # found from the folder rlrun runs in, as an env module is
    # The `rlrun` script, as a user starts it: `python -m` would put the current folder on sys.path itself.
    script = Path(sys.executable).with_name("rlrun")
    done = subprocess.run(
        [
            str(script),
            "train",
            "reinforce_cartpole",
            *TINY,
            "--set",
            'env.wrappers=["beside_wrappers:HalfReward"]',
            "--set",
            "agent.network.kind=beside_nets:tiny",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("café run", '"café run" cannot be used (`é` and a space are not allowed)'),
        ("it's", "\"it's\" cannot be used (`'` is not allowed)"),
    ],
)
def test_a_run_name_outside_the_rule_is_said_as_typed_with_what_is_not_allowed(
    tmp_path: Path, name: str, said: str
) -> None:
    refused = invoke(tmp_path, "train", "reinforce_cartpole", *TINY, "--name", name)
    assert refused.code == 2
    assert (
        refused.stderr == f"error: run name {said}: a name uses only plain ASCII letters and digits and `_`, `.`,"
        " `-`, starts with a letter or digit, is not all digits and is not `latest`\n"
    )
