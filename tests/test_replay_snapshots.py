"""Replay-memory snapshots, incremental and shared (snapshot format 2), through real trainings.

DQN on CartPole with a memory small enough that its ring wraps during the run: snapshots every
1k frames, each writing only the rows added since the one before and hard-linking the rest.
Retention deletes old snapshots while later ones still use their segments; every kept snapshot
must verify and resume bit for bit (`test_resume.assert_same_run` against a run never
interrupted), a kill -9 in the middle of writing a segment must never leave a snapshot that is
used, and `rlrun gc` / `rlrun rm` must leave no segment that no kept snapshot names.
"""

from __future__ import annotations

import json
import shutil
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers import rlrun, run_cli
from same_run import (
    WRAPPING_TARGET,
    assert_same_run,
    assert_snapshots_sound,
    final_state,
    resume_ok,
    train_wrapping_dqn,
)

from rlrun.registry import Registry
from rlrun.snapshot import layout
from rlrun.testhooks import CRASH_ENV

pytestmark = pytest.mark.slow  # real trainings in subprocesses

SNAPSHOTS = 5  # one every 1k frames


@pytest.fixture(scope="module")
def five_snapshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home whose run wrote SNAPSHOTS snapshots in a row, retention deleting the older ones."""
    home = tmp_path_factory.mktemp("five") / "runs"
    done = train_wrapping_dqn(home, SNAPSHOTS * 1000)
    assert done.code == 0, done.stderr
    return home


def checkpoints(home: Path) -> list[Any]:
    with Registry.open(home, create=False) as registry:
        return sorted(registry.all_checkpoints(), key=lambda c: c.frame)


def assert_no_orphan_segments(home: Path) -> None:
    """Every file in a checkpoints folder belongs to a snapshot the registry lists, and each
    segment has exactly as many names as listed snapshots naming it: no link hides elsewhere."""
    listed = checkpoints(home)
    folders = {home / c.path for c in listed}
    named: Counter[int] = Counter()
    for checkpoint in listed:
        manifest = json.loads((home / checkpoint.path / layout.MANIFEST).read_text())
        for file in manifest["files"]:
            if file.startswith(f"{layout.LOGS}/"):
                named[(home / checkpoint.path / file).stat().st_ino] += 1
    for file in home.glob("*/s*/checkpoints/**/*"):
        if file.is_file():
            assert any(folder in file.parents for folder in folders), f"{file} belongs to no listed snapshot"
            if file.parent.name == layout.LOGS:
                assert file.stat().st_nlink == named[file.stat().st_ino], file


def test_five_snapshots_with_retention_each_kept_one_resumes_exactly(
    wrapping_dqn_reference: dict[str, Any], five_snapshots: Path, tmp_path: Path
) -> None:
    kept = checkpoints(five_snapshots)
    assert [c.frame for c in kept][-1] == SNAPSHOTS * 1000
    assert len(kept) < SNAPSHOTS, "retention deleted none"
    shared = [p for c in kept for p in (five_snapshots / c.path / layout.LOGS).iterdir() if p.stat().st_nlink > 1]
    assert shared, "no kept snapshot shares a segment"
    assert_snapshots_sound(five_snapshots)
    assert_no_orphan_segments(five_snapshots)
    for start in kept:
        home = tmp_path / f"from-{start.frame}"
        shutil.copytree(five_snapshots, home)
        for newer in (c for c in kept if c.frame > start.frame):  # damaged: the resume falls back to `start`
            with open(home / newer.path / layout.META, "a") as file:
                file.write(" ")
        resumed = resume_ok(home, "latest", "--frames", str(WRAPPING_TARGET))
        assert f"from snapshot at frame {start.frame:,}" in resumed.stderr
        assert_same_run(wrapping_dqn_reference, final_state(home))
        assert_snapshots_sound(home)
        assert_no_orphan_segments(home)


@pytest.mark.parametrize("path", ["train", "resume"])
def test_a_kill_while_a_segment_is_written_never_leaves_a_snapshot_that_is_used(
    path: str, wrapping_dqn_reference: dict[str, Any], five_snapshots: Path, home: Path
) -> None:
    if path == "train":  # the 3rd segment: the first new one of the second snapshot (rows, frames each)
        crashed = train_wrapping_dqn(home, SNAPSHOTS * 1000, env={CRASH_ENV: "segment-half-written#3"})
        newest = 1000
    else:  # a resume's first snapshot, linking the one it resumed from
        shutil.copytree(five_snapshots, home)
        crashed = run_cli(
            home, "resume", "latest", "--frames", str(WRAPPING_TARGET), env={CRASH_ENV: "segment-half-written"}
        )
        newest = SNAPSHOTS * 1000
    assert crashed.code == -signal.SIGKILL, crashed.stderr
    torn = [p for p in home.glob("*/s0/checkpoints/.*") if layout.is_temporary(p)]
    assert torn and list(torn[0].glob(f"{layout.LOGS}/*.npy")), "killed before any segment was written"
    assert checkpoints(home)[-1].frame == newest, "the torn snapshot reached the registry"
    resumed = resume_ok(home, "latest", "--frames", str(WRAPPING_TARGET))
    assert f"from snapshot at frame {newest:,}" in resumed.stderr
    assert_same_run(wrapping_dqn_reference, final_state(home))
    assert_snapshots_sound(home)
    assert_no_orphan_segments(home)


def test_gc_and_rm_leave_no_segment_behind(five_snapshots: Path, home: Path) -> None:
    shutil.copytree(five_snapshots, home)
    run_id = checkpoints(home)[0].run_id
    checkpoints_dir = home / run_id / "s0" / "checkpoints"
    # A snapshot torn by a kill (a temporary folder linking live segments) and one the registry
    # never heard of: gc removes both, and the segments they linked lose those names only.
    newest = home / checkpoints(home)[-1].path
    for name in (layout.temporary_name(layout.snapshot_name(9000)), layout.snapshot_name(9000)):
        shutil.copytree(newest, checkpoints_dir / name, copy_function=_link)
    collected = rlrun(home, "gc", "--json")
    assert collected.code == 0, collected.stderr
    report = collected.json()
    assert len(report["temporaries"]) == 1 and len(report["orphans"]) == 1
    assert report["freed_bytes"] == 0, "each of their files is also a kept snapshot's: deleting them frees nothing"
    assert_no_orphan_segments(home)
    assert_snapshots_sound(home)
    removed = rlrun(home, "rm", run_id, "--yes")
    assert removed.code == 0, removed.stderr
    assert not (home / run_id).exists()
    assert not list(home.glob("**/*.npy"))


def _link(source: str, destination: str) -> None:
    Path(destination).hardlink_to(source)


def test_a_run_with_format_1_snapshots_imports_and_resumes(home: Path, tmp_path: Path) -> None:
    """A run folder written before format 2 (tests/fixtures/format1-run: DQN, 2 copies, a memory
    of 1000 that wrapped) is imported, verified and continued; its next snapshot is format 2."""
    fixture = Path(__file__).resolve().parent / "fixtures" / "format1-run" / "bngd4n8pag"
    folder = tmp_path / fixture.name
    shutil.copytree(fixture, folder)
    imported = rlrun(home, "import", str(folder))
    assert imported.code == 0, imported.stderr
    resumed = resume_ok(home, "latest", "--frames", "2400")
    assert "from snapshot at frame 1,600" in resumed.stderr
    newest = checkpoints(home)[-1]
    assert newest.frame == 2400
    manifest = layout.verify(home / newest.path, newest.sha256, deep=True)
    assert manifest["format"] == layout.FORMAT_VERSION and set(manifest["logs"]) == {"rows", "frames"}
    assert manifest["logs"]["rows"]["end"] == 1000 + 800, "the 1000 rows read from format 1, then 800 more"
