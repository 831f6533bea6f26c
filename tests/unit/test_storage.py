"""Homes given as URLs (`rlrun.storage`): what is refused before anything is written, and how a URL
names its working copy. No server here: tests/test_object_store.py trains against one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import invoke

from rlrun import paths, snapshot, storage
from rlrun.errors import BadInput, StoreUnreachable
from rlrun.home import maintenance
from rlrun.registry import Registry
from rlrun.registry.records import TrialLink
from rlrun.snapshot import layout, logs, remote
from rlrun.trackers import status as tracker_status

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
META = snapshot.SnapshotMeta.from_json(
    json.loads((FIXTURES / "snapshot-meta" / "captured-mid-episode.json").read_text())
)


@pytest.mark.parametrize("command", [["ls"], ["train", "reinforce_cartpole", "--frames", "1000"], ["gc"]])
def test_a_url_home_without_a_registry_url_is_one_line_and_nothing_written(
    command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(storage.CACHE_ENV, str(tmp_path / "cache"))
    done = invoke(None, *command, "--home", "s3://bucket/runs")
    assert done.code == 2
    assert done.stderr.count("\n") == 1 and "RLRUN_DB" in done.stderr and "s3://bucket/runs" in done.stderr
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == [], "something was written (before the fix: a folder s3:/bucket/runs)"


def test_rlrun_home_may_be_a_url_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    done = invoke(None, "ls", env={"RLRUN_HOME": "s3://bucket/runs"})
    assert done.code == 2 and "s3://bucket/runs" in done.stderr and "RLRUN_DB" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_scheme_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    done = invoke(None, "ls", "--home", "nosuchstore://bucket/runs", env={"RLRUN_DB": f"sqlite:///{tmp_path}/r.db"})
    assert done.code == 2 and "nosuchstore://" in done.stderr and done.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_urls_and_folders() -> None:
    assert storage.is_url("s3://bucket/runs") and storage.is_url("gs://b/p") and storage.is_url("az://c/p")
    assert not storage.is_url("runs") and not storage.is_url("/data/runs") and not storage.is_url("file:///data")


def test_each_url_has_its_own_working_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(storage.CACHE_ENV, str(tmp_path))
    assert storage.working_copy("s3://bucket/runs") == tmp_path / "homes" / "s3" / "bucket" / "runs"
    assert storage.working_copy("s3://bucket/runs") != storage.working_copy("gs://bucket/runs")
    assert storage.working_copy("s3://bucket/../x") == tmp_path / "homes" / "s3" / "bucket" / "x"


def test_a_local_home_has_no_mirror_and_is_named_by_its_folder(tmp_path: Path) -> None:
    assert storage.mirror_of(tmp_path / "runs" / "abc") is None
    assert paths.home_address(tmp_path / "runs") == str(tmp_path / "runs")
    assert paths.task_home(str(tmp_path / "runs")) == tmp_path / "runs"


# ---------------------------------------------------------------------------------------------
# Snapshots in a store (fsspec's in-memory one: the same calls as S3's, in this process)


def _logged(end: int) -> snapshot.Snapshot:
    """A snapshot whose one log holds items [0, end) (items are their own index), in a ring of 100."""
    ring = np.zeros((100, 3), np.int64)
    for item in range(max(0, end - 100), end):
        ring[item % 100] = item
    return snapshot.Snapshot(META, {"w": torch.arange(3)}, logs={"rows": logs.Log(ring, end)})


def _segment_objects(mirror: storage.Mirror) -> set[str]:
    return {key for key in mirror.keys(mirror.root) if f"/{remote.SEGMENTS}/" in key}


def test_segments_are_shared_by_reference_and_collected_with_their_last_snapshot(tmp_path: Path) -> None:
    pytest.importorskip("fsspec", reason="a home in object storage needs an extra: pip install -e '.[s3]'")
    url = f"memory://rlrun-unit/{tmp_path.name}"
    home = storage.open_home(url, local=tmp_path / "writer")
    mirror = storage.mirror_of(home)
    assert mirror is not None
    checkpoints = home / "run" / "s0" / "checkpoints"
    first = snapshot.write(checkpoints / "f000000000060", _logged(60))
    second = snapshot.write(checkpoints / "f000000000130", _logged(130), previous=first.path)
    shared = _segment_objects(mirror)
    # [0, 60) written once and named by both; the second wrote only [60, 100) and [100, 130) (the wrap)
    assert sorted(key.rsplit("/", 1)[1].split(".")[1] for key in shared) == [
        "000000000000-000000000060",
        "000000000060-000000000100",
        "000000000100-000000000130",
    ]

    reader = storage.open_home(url, local=tmp_path / "reader")  # another machine: nothing local
    read = snapshot.read(reader / "run" / "s0" / "checkpoints" / "f000000000130", second.sha256)
    restored = logs.load(read.logs["rows"])
    assert restored.end == 130 and np.array_equal(restored.ring, _logged(130).logs["rows"].ring)

    snapshot.remove(first.path)  # the first's segment is still the second's
    assert _segment_objects(mirror) == shared
    snapshot.remove(second.path)
    assert mirror.keys(mirror.root) == [], "the last snapshot took its segments with it"


def test_a_snapshot_without_its_manifest_in_the_store_is_torn_and_swept(tmp_path: Path) -> None:
    pytest.importorskip("fsspec", reason="a home in object storage needs an extra: pip install -e '.[s3]'")
    url = f"memory://rlrun-unit/{tmp_path.name}"
    home = storage.open_home(url, local=tmp_path / "writer")
    mirror = storage.mirror_of(home)
    assert mirror is not None
    checkpoints = home / "run" / "s0" / "checkpoints"
    kept = snapshot.write(checkpoints / "f000000000060", _logged(60))
    torn = snapshot.write(checkpoints / "f000000000130", _logged(130), previous=kept.path)
    mirror.delete([mirror.key(torn.path / layout.MANIFEST)])  # a kill after its objects, before its manifest
    assert remote.snapshots(checkpoints) == {kept.path.name: True, torn.path.name: False}
    assert [p.name for p in snapshot.sweep_after(checkpoints, 60)] == [torn.path.name, torn.path.name]
    assert remote.snapshots(checkpoints) == {kept.path.name: True}
    reader = storage.open_home(url, local=tmp_path / "reader")
    assert snapshot.read(reader / "run" / "s0" / "checkpoints" / kept.path.name, kept.sha256).meta == META


def test_an_object_altered_in_the_store_is_refused_on_read(tmp_path: Path) -> None:
    pytest.importorskip("fsspec", reason="a home in object storage needs an extra: pip install -e '.[s3]'")
    url = f"memory://rlrun-unit/{tmp_path.name}"
    home = storage.open_home(url, local=tmp_path / "writer")
    mirror = storage.mirror_of(home)
    assert mirror is not None
    written = snapshot.write(home / "run" / "s0" / "checkpoints" / "f000000000060", _logged(60))
    segment = next(iter(_segment_objects(mirror)))
    mirror.put_bytes(segment, (mirror.get_bytes(segment) or b"")[:-8] + b"\0" * 8)
    reader = storage.open_home(url, local=tmp_path / "reader")
    with pytest.raises(snapshot.SnapshotError, match="altered"):
        snapshot.read(reader / "run" / "s0" / "checkpoints" / written.path.name, written.sha256)


# ---------------------------------------------------------------------------------------------
# What else a home in object storage keeps there: manifests, trackers' reports; `db rebuild`


def _writer_and_reader(tmp_path: Path) -> tuple[Path, Path, storage.Mirror]:
    """One home in fsspec's in-memory store, seen from two machines: working copies with nothing in
    common, each with its own registry file."""
    pytest.importorskip("fsspec", reason="a home in object storage needs an extra: pip install -e '.[s3]'")
    url = f"memory://rlrun-unit/{tmp_path.name}"
    writer = storage.open_home(url, local=tmp_path / "writer")
    reader = storage.open_home(url, local=tmp_path / "reader")
    mirror = storage.mirror_of(writer)
    assert mirror is not None
    return writer, reader, mirror


def _run_with_a_trial(registry: Registry, run_id: str = "ra00000001") -> None:
    registry.create_search(
        search_id="sa00000001",
        name="sweep",
        spec_name="ppo_cartpole",
        spec_json="{}",
        space_json="{}",
        settings_json="{}",
        host="here",
        pid=1,
    )
    registry.create_run(
        run_id=run_id,
        name=None,
        spec_name="ppo_cartpole",
        algorithm="ppo",
        env_id="CartPole-v1",
        max_frame=3000,
        seed=0,
        num_sessions=1,
        spec_json="{}",
        host="here",
        pid=1,
        trial=TrialLink("sa00000001", 0, json.dumps({"lr": 0.001})),
    )


def test_the_search_manifest_and_run_manifest_reach_the_store_in_each_write(tmp_path: Path) -> None:
    writer, _, mirror = _writer_and_reader(tmp_path)
    with Registry.open(writer) as registry:
        _run_with_a_trial(registry)
        search_manifest = paths.search_manifest(writer, "sa00000001")
        assert mirror.get_bytes(mirror.key(search_manifest)) == search_manifest.read_bytes()
        (trial,) = registry.get_search("sa00000001").trials
        registry.record_trial(
            trial.id, intermediate_json="[[500, 9.5]]", system_attrs_json="{}", state="complete", value=9.5
        )
        stored = json.loads(mirror.get_bytes(mirror.key(search_manifest)) or b"{}")
        assert [(t["state"], t["value"]) for t in stored["trials"]] == [("complete", 9.5)]
        run_manifest = paths.run_dir(writer, "ra00000001") / paths.RUN_MANIFEST
        assert json.loads(mirror.get_bytes(mirror.key(run_manifest)) or b"{}")["trial"]["search_id"] == "sa00000001"


def test_a_trackers_report_is_read_from_the_store(tmp_path: Path) -> None:
    writer, reader, _ = _writer_and_reader(tmp_path)
    report = tracker_status.Delivered("mlflow", "abc", 3, "down")
    tracker_status.write(writer / "ra00000001" / "s0", [report], publish=False)  # a session's: under its lease
    assert tracker_status.read(reader / "ra00000001" / "s0") == {}
    tracker_status.publish(writer / "ra00000001" / "s0")
    assert tracker_status.read(reader / "ra00000001" / "s0") == {"mlflow": report}
    wandb = tracker_status.Delivered("wandb", "ra00000001-s0", 0)
    tracker_status.write(reader / "ra00000001" / "s0", [wandb])  # `rlrun track` elsewhere keeps mlflow's report
    assert tracker_status.read(writer / "ra00000001" / "s0") == {"mlflow": report, "wandb": wandb}


def test_db_rebuild_reads_a_url_home_from_its_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry lost with its machine: rebuilt on another machine, whose working copy is empty but
    for a run deleted since, from the store alone; each snapshot's hash and size as recorded."""
    writer, reader, _ = _writer_and_reader(tmp_path)
    with Registry.open(writer) as registry:
        _run_with_a_trial(registry)
        (session,) = registry.get_run("ra00000001").sessions
        registry.start_session(session.id, host="here", pid=1)
        checkpoints = paths.checkpoints_dir(writer, "ra00000001", 0)
        first = snapshot.write(checkpoints / "f000000000060", _logged(60))
        second = snapshot.write(checkpoints / "f000000000130", _logged(130), previous=first.path)
        for written, frame in ((first, 60), (second, 130)):
            registry.add_checkpoint(
                session.id,
                frame=frame,
                kind="periodic",
                sha256=written.sha256,
                path=str(written.path.relative_to(writer)),
                size_bytes=written.size_bytes,
            )
        recorded = {c.path: (c.sha256, c.size_bytes) for c in registry.get_run("ra00000001").checkpoints}
    stale = reader / "rz00000009" / paths.RUN_MANIFEST  # deleted from the store by another machine's `rlrun rm`
    stale.parent.mkdir(parents=True)
    stale.write_bytes((paths.run_dir(writer, "ra00000001") / paths.RUN_MANIFEST).read_bytes())

    monkeypatch.setenv(paths.DB_ENV, f"sqlite:///{tmp_path / 'rebuilt.sqlite'}")
    with Registry.open(reader) as registry:
        report = maintenance.rebuild(registry)
        assert (report.restored, report.searches, report.problems) == (["ra00000001"], ["sa00000001"], [])
        detail = registry.get_run("ra00000001")
        assert {c.path: (c.sha256, c.size_bytes) for c in detail.checkpoints} == recorded
        assert [t.run_id for t in registry.get_search("sa00000001").trials] == ["ra00000001"]
    read = snapshot.read(reader / "ra00000001" / "s0" / "checkpoints" / "f000000000130", second.sha256)
    assert logs.load(read.logs["rows"]).end == 130


def test_db_rebuild_names_a_snapshot_altered_in_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writer, reader, mirror = _writer_and_reader(tmp_path)
    with Registry.open(writer) as registry:
        _run_with_a_trial(registry)
        written = snapshot.write(paths.checkpoints_dir(writer, "ra00000001", 0) / "f000000000060", _logged(60))
    meta = mirror.key(written.path / layout.META)
    mirror.put_bytes(meta, (mirror.get_bytes(meta) or b"").replace(b'"frame"', b'"frame" ', 1))
    monkeypatch.setenv(paths.DB_ENV, f"sqlite:///{tmp_path / 'rebuilt.sqlite'}")
    with Registry.open(reader) as registry:
        report = maintenance.rebuild(registry)
    assert report.restored == [] and len(report.problems) == 1
    assert "ra00000001" in report.problems[0] and "meta.json does not match its manifest" in report.problems[0]


class _Unreachable:
    """A store library whose server does not answer (what every library raises differs)."""

    def ls(self, path: str) -> list[str]:
        raise ConnectionError("Cannot connect to host 127.0.0.1:1\nmore lines")


@pytest.mark.parametrize(
    ("url", "setting"),
    [
        ("s3://b/runs", "AWS_ENDPOINT_URL"),
        ("gs://b/runs", "STORAGE_EMULATOR_HOST"),
        ("az://b/runs", "AZURE_STORAGE_CONNECTION_STRING"),
    ],
)
def test_an_unreachable_store_is_one_line_naming_its_endpoint_setting(url: str, setting: str, tmp_path: Path) -> None:
    """Before, every store's line named AWS_ENDPOINT_URL, which gcsfs and adlfs never read."""
    mirror = storage.Mirror(url, tmp_path, (_Unreachable(), url.split("://")[1]))
    with pytest.raises(StoreUnreachable) as refused:  # no answer: exit 3, not bad input
        mirror.check()
    said = str(refused.value)
    assert refused.value.exit_code == 3
    assert said.startswith(f"--home {url} cannot be reached (Cannot connect to host 127.0.0.1:1)") and "\n" not in said
    assert setting in said and (setting == "AWS_ENDPOINT_URL") == ("AWS_ENDPOINT_URL" in said)


class _Refusing:
    """A store that answers no (a wrong bucket, denied credentials): the command is to be fixed."""

    def ls(self, path: str) -> list[str]:
        raise PermissionError("Access Denied")


def test_a_store_that_answers_no_is_bad_input() -> None:
    mirror = storage.Mirror("s3://b/runs", Path("/nonexistent"), (_Refusing(), "b/runs"))
    with pytest.raises(BadInput, match="cannot be reached \\(Access Denied\\)") as refused:
        mirror.check()
    assert refused.value.exit_code == 2


def test_a_manifest_reaches_the_store_after_its_transaction_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rlrun stop` (and every registry write) commits before its PUT: a store that hangs holds no
    registry lock, so the sessions it would stop keep their heartbeats. Before, the PUT ran inside
    the transaction, and another connection saw no stop request while it waited."""
    from rlrun.training import control

    writer, _, mirror = _writer_and_reader(tmp_path)
    with Registry.open(writer) as registry:
        _run_with_a_trial(registry)
    seen_at_put: list[float | None] = []
    put = storage.Mirror.put

    def observed_put(self: storage.Mirror, path: Path) -> None:
        if path.name == paths.RUN_MANIFEST:
            with Registry.open(writer) as other:  # another process's view: committed rows only
                seen_at_put.append(other.resolve("ra00000001").stop_requested_at)
        put(self, path)

    monkeypatch.setattr(storage.Mirror, "put", observed_put)
    outcome = control.stop("ra00000001", home=writer)
    assert outcome.stopping and seen_at_put and all(asked is not None for asked in seen_at_put), seen_at_put
    stored = json.loads(mirror.get_bytes(mirror.key(paths.run_dir(writer, "ra00000001") / paths.RUN_MANIFEST)) or b"{}")
    assert stored["run"]["stop_requested_at"] == outcome.requested_at
