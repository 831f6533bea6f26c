"""Rough edges a new user hit (issue 44), each held by a real run or a real terminal: a crashed run's
progress in `ls`, scores told apart, tables that fit 80 columns, trial runs kept out of the way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import TINY, invoke, run_cli

from rlrun.registry import Registry

pytestmark = pytest.mark.slow


# ---- a crashed run's progress --------------------------------------------------------------------


def test_ls_counts_a_crashed_runs_progress_up_to_its_newest_snapshot(tmp_path: Path) -> None:
    # Killed (SIGKILL, no cleanup) right after its 2k snapshot is recorded: the last heartbeat is
    # older, and a resume continues from 2k, so 2k of 3k is what was done.
    crashed = run_cli(tmp_path, "train", "reinforce_cartpole", *TINY,
                      env={"RLRUN_TEST_CRASH_AT": "checkpoint-recorded#2", "RLRUN_TEST_STALE_AFTER_SECONDS": "1"})
    assert crashed.code != 0
    listed = invoke(tmp_path, "ls", "--json").json()[0]
    assert (listed["status"], listed["session_frame"], listed["frames_done"]) == ("crashed", 2000, 2000)
    table = invoke(tmp_path, "ls").stderr
    assert " 2k/3k " in table, table


def test_ls_counts_a_heartbeat_beyond_the_newest_snapshot(tmp_path: Path) -> None:
    with Registry.open(tmp_path) as registry:
        run = registry.create_run(run_id="a1", name=None, spec_name="reinforce_cartpole", algorithm="reinforce",
                                  env_id="CartPole-v1", max_frame=3000, seed=1, num_sessions=1,
                                  spec_json=json.dumps({"name": "reinforce_cartpole"}), host="box", pid=1)
        session = registry.get_session(run.id, 0)
        registry.add_checkpoint(session.id, frame=2000, kind="periodic", path="p", sha256="0", size_bytes=1)
        registry.heartbeat(session.id, frame=2500, episode=1, opt_step=1)
        assert registry.list_runs()[0].session_frame == 2500
        registry.add_checkpoint(session.id, frame=3000, kind="final", path="q", sha256="1", size_bytes=1)
        assert registry.list_runs()[0].session_frame == 3000
