"""A runs home in object storage, end to end with a replay memory: each test once in S3, Google Cloud
Storage and Azure Blob Storage, each store a real server on loopback (moto's S3 server,
gcp-storage-emulator, Azurite; conftest.py's s3_bucket, gcs_bucket and azure_container).

DQN whose memory wraps during the run, snapshots every 1k frames (each uploading only the rows added
since the one before), retention keeping 2: killed by SIGKILL after a snapshot's objects reached the
store and before its manifest did; the torn snapshot is never used and is swept; the run resumed in
a process with a fresh working copy (so everything it reads comes from the store) equals, bit for
bit, the same run trained straight on a local disk; `enjoy` reads it; `gc` and `rm` leave no object
behind. The exactness and crash tests marked `any_home` (tests/test_resume.py,
tests/test_crash_windows.py) run on such a home too.
"""

from __future__ import annotations

import json
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers import rlrun, store_home
from same_run import (
    WRAPPING_TARGET,
    assert_same_run,
    assert_snapshots_sound,
    final_state,
    resume_ok,
    train_wrapping_dqn,
)

from rlrun import storage
from rlrun.registry import Registry
from rlrun.snapshot import layout, remote
from rlrun.testhooks import CRASH_ENV

pytestmark = pytest.mark.slow  # real trainings in subprocesses, against a real storage server

BUCKETS = {"s3": "s3_bucket", "gs": "gcs_bucket", "az": "azure_container"}
"""Each store these tests run against: its URL scheme, and the fixture of its bucket on loopback."""


@pytest.fixture(params=list(BUCKETS))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A fresh home in the store the test is run for (a prefix of its own in the session's bucket)."""
    bucket = request.getfixturevalue(BUCKETS[request.param])
    return store_home(f"{request.param}://{bucket}/{uuid.uuid4().hex[:8]}/runs", tmp_path / "runs")


def test_killed_mid_upload_swept_resumed_exactly_then_enjoyed_collected_and_removed(
    wrapping_dqn_reference: dict[str, Any], store: Path
) -> None:
    home = store
    mirror = storage.mirror_of(home)
    assert mirror is not None
    crashed = train_wrapping_dqn(home, WRAPPING_TARGET, env={CRASH_ENV: "snapshot-half-uploaded#4"})
    assert crashed.code == -signal.SIGKILL, crashed.stderr
    with Registry.open(home, create=False) as registry:
        run_id = registry.resolve("latest").id
        listed = sorted(c.frame for c in registry.all_checkpoints())
    assert listed[-1] == 3000, "the snapshot torn mid-upload reached the registry"
    stored = remote.run_snapshots(home / run_id)
    torn = [path for path, complete in stored.items() if not complete]
    assert [p.name for p in torn] == [layout.snapshot_name(4000)], stored
    assert list(home.glob(f"{run_id}/s0/checkpoints/*")) == [], "the test's working copy was written by the run"

    collected = rlrun(home, "gc", "--json")
    assert collected.code == 0, collected.stderr
    assert collected.json()["temporaries"] == [str(torn[0].relative_to(home))]
    assert all(remote.run_snapshots(home / run_id).values()), "gc left the torn snapshot in the store"

    resumed = resume_ok(home, "latest")
    assert "from snapshot at frame 3,000" in resumed.stderr
    assert_same_run(wrapping_dqn_reference, final_state(home))
    assert_snapshots_sound(home)  # the store holds the listed snapshots and the segments they name, no more
    with Registry.open(home, create=False) as registry:
        kept = sorted(registry.all_checkpoints(), key=lambda c: c.frame)[-2:]  # the newest two: 5k and 6k
    manifests = [json.loads(mirror.get_bytes(mirror.key(home / c.path / layout.MANIFEST)) or b"") for c in kept]
    segments = [
        {k for k in remote.object_keys(mirror, home / c.path, m).values() if f"/{remote.SEGMENTS}/" in k}
        for c, m in zip(kept, manifests, strict=True)
    ]
    assert segments[0] & segments[1], "no segment object shared by reference"

    enjoyed = rlrun(home, "enjoy", "latest", "--episodes", "1", "--json")
    assert enjoyed.code == 0, enjoyed.stderr
    shown = rlrun(home, "show", "latest", "--metrics", "--json")
    assert shown.code == 0 and shown.json(), shown.stderr

    removed = rlrun(home, "rm", run_id, "--yes")
    assert removed.code == 0, removed.stderr
    assert mirror.keys(mirror.root) == [], "rm left objects behind"


def test_a_lost_registry_is_rebuilt_from_the_store_and_the_run_resumes_exactly(
    wrapping_dqn_reference: dict[str, Any], store: Path
) -> None:
    """Killed -9 mid-upload, then the registry file lost with the machine: `rlrun db rebuild` on
    another (a fresh working copy) reads run.json and every snapshot's manifest and meta.json from the
    store: the same checkpoints (hashes and sizes, shared segments counted), evaluations and spec
    revisions as before, the torn snapshot not among them; the resume is the straight local run."""
    home = store
    crashed = train_wrapping_dqn(home, WRAPPING_TARGET, env={CRASH_ENV: "snapshot-half-uploaded#4"})
    assert crashed.code == -signal.SIGKILL, crashed.stderr
    before = _restorable(rlrun(home, "show", "latest", "--json").json())
    assert max(c["frame"] for c in before["checkpoints"]) == 3000  # 4,000 was torn
    (home / "registry.sqlite").unlink()
    rebuilt = rlrun(home, "db", "rebuild", "--json")
    assert rebuilt.code == 0, rebuilt.stderr
    assert (len(rebuilt.json()["restored"]), rebuilt.json()["problems"]) == (1, [])
    assert _restorable(rlrun(home, "show", "latest", "--json").json()) == before

    resumed = resume_ok(home, "latest")
    assert "from snapshot at frame 3,000" in resumed.stderr
    assert_same_run(wrapping_dqn_reference, final_state(home))
    assert_snapshots_sound(home)


def _restorable(shown: dict[str, Any]) -> dict[str, Any]:
    """What `show --json` says that a rebuild restores: the run (its status judged again), its
    checkpoints and evaluations (less row ids and when they were recorded: the store keeps object
    times instead; of a crashed session, those up to its newest snapshot) and spec revisions."""
    dropped = ("id", "session_id", "created_at")
    newest = max(c["frame"] for c in shown["checkpoints"])
    return {
        "run": {k: shown["run"][k] for k in ("id", "status", "spec_name", "max_frame", "seed")},
        "evaluations": [
            {k: v for k, v in row.items() if k not in dropped} for row in shown["evaluations"] if row["frame"] <= newest
        ],
        **{
            key: [{k: v for k, v in row.items() if k not in dropped} for row in shown[key]]
            for key in ("checkpoints", "spec_revisions")
        },
    }
