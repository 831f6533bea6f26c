"""Spec validation without torch, the torch-free snapshot layout, and the typed snapshot metadata.

Fast, in-process tests (bar one subprocess that starts with a clean `sys.modules`); nothing trains.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlrun.clock import Clock
from rlrun.errors import SpecError
from rlrun.snapshot import layout
from rlrun.snapshot.meta import Best, RandomStates, SnapshotMeta
from rlrun.spec import builtin_document, builtin_names, validate_spec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "snapshot-meta"
"""meta.json files written by a real session before the record existed (one with the env's state
captured mid-episode, one from async envs whose state cannot be captured)."""


def imported_after(code: str) -> set[str]:
    """Top-level packages that running `code` in a fresh interpreter imports."""
    probe = code + "\nimport sys\nprint(','.join(sorted({m.split('.')[0] for m in sys.modules})))\n"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return set(done.stdout.strip().rsplit("\n", 1)[-1].split(","))


# ---------------------------------------------------------------------------------------------
# Spec


@pytest.mark.parametrize("atari", [False, True], ids=["not-atari", "atari"])
def test_every_builtin_spec_validates_without_importing_torch(atari: bool) -> None:
    if atari:  # Atari's env ids are registered by ale-py (the `atari` extra), not by Gymnasium
        pytest.importorskip("ale_py")
    loaded = imported_after(
        textwrap.dedent(f"""
        from rlrun.spec import builtin_document, builtin_names, validate_spec
        for name in builtin_names():
            document = builtin_document(name)
            if document["env"]["id"].startswith("ALE/") == {atari}:
                validate_spec(document)
    """)
    )
    assert "rlrun" in loaded and "pydantic" in loaded
    assert "torch" not in loaded
    assert "gymnasium" in loaded  # env ids are checked against Gymnasium's registry


def test_without_the_env_id_check_neither_torch_nor_gymnasium_is_imported() -> None:
    loaded = imported_after(
        textwrap.dedent("""
        from rlrun.spec import builtin_document, builtin_names, validate_spec
        for name in builtin_names():
            validate_spec(builtin_document(name), check_env_id=False)
        import rlrun.home.maintenance
    """)
    )
    assert "rlrun" in loaded and not loaded & {"torch", "gymnasium", "numpy"}, loaded


def test_built_ins_that_name_one_dataset_make_it_by_one_recipe() -> None:
    """A dataset keeps the recipe that made it and refuses another (`rlrun.training.datasets`): two
    built-ins naming one id with two recipes would have one of them refused on a machine where the
    other ran first."""
    recipes: dict[str, dict[str, str]] = {}
    for name in builtin_names():
        data = builtin_document(name).get("data") or {}
        if "recipe" in data:
            recipes.setdefault(data["dataset"], {})[name] = json.dumps(data["recipe"], sort_keys=True)
    assert recipes, "no built-in records its dataset from a recipe"
    for dataset, by_spec in recipes.items():
        assert len(set(by_spec.values())) == 1, f"{dataset}: {by_spec}"


def test_skipping_the_env_id_check_skips_only_that() -> None:
    document = builtin_document(builtin_names()[0])
    unknown = {**document, "env": {**document["env"], "id": "NoSuchEnv-v0"}}
    assert validate_spec(unknown, check_env_id=False).env.id == "NoSuchEnv-v0"
    with pytest.raises(SpecError, match="unknown Gymnasium environment"):
        validate_spec(unknown)
    wrong = {**unknown, "meta": {**document["meta"], "keep_checkpoints": 0}}
    with pytest.raises(SpecError, match=r"meta\.keep_checkpoints = 0"):
        validate_spec(wrong, check_env_id=False)


def test_agent_classes_use_the_config_the_spec_validated_with() -> None:
    from rlrun.algorithms import agent_class, algorithm_names, config_class

    for name in algorithm_names():
        config = config_class(name)
        assert config.model_fields["algorithm"].default == name
        assert agent_class(name).__module__ == f"rlrun.algorithms.{name}"
        assert sys.modules[f"rlrun.algorithms.{name}"].Config is config


# ---------------------------------------------------------------------------------------------
# Layout


def test_names_and_temporary_folders(tmp_path: Path) -> None:
    assert layout.snapshot_name(5000) == "f000000005000"
    temporary = layout.temporary_name(layout.snapshot_name(5000))
    assert temporary.startswith(".f000000005000.tmp-") and temporary != layout.temporary_name("f000000005000")
    assert layout.is_temporary(tmp_path / temporary) and not layout.is_snapshot(tmp_path / temporary)
    assert layout.is_snapshot(tmp_path / "f000000005000") and not layout.is_temporary(tmp_path / "f000000005000")


def make_snapshot(folder: Path, files: dict[str, bytes]) -> str:
    """A snapshot folder holding `files` and a manifest of them; returns its sha256."""
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    hashes = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    (folder / layout.MANIFEST).write_bytes(layout.manifest_bytes(hashes))
    return layout.sha256(folder)


def test_listing_sweeping_and_sizing_a_run_folder(tmp_path: Path) -> None:
    run = tmp_path / "run"
    make_snapshot(run / "s0" / "checkpoints" / "f000000002000", {layout.META: b"{}"})
    make_snapshot(run / "s0" / "checkpoints" / "f000000001000", {layout.META: b"{}", "arrays/obs.npy": b"12345"})
    make_snapshot(run / "s1" / "checkpoints" / "f000000001000", {layout.META: b"{}"})
    torn = run / "s1" / "checkpoints" / layout.temporary_name("f000000003000")
    torn.mkdir()
    (torn / layout.STATE).write_bytes(b"half")

    complete = layout.snapshot_folders(run)
    assert [(layout.session_index(p), p.name) for p in complete] == [
        (0, "f000000001000"),
        (0, "f000000002000"),
        (1, "f000000001000"),
    ]
    assert layout.snapshot_folders(run, include_temporary=True) == [*complete[:2], torn, complete[2]]
    assert all(layout.is_complete(p) for p in complete) and not layout.is_complete(torn)
    first = complete[0]
    assert layout.size_bytes(first) == 2 + 5 + (first / layout.MANIFEST).stat().st_size
    assert layout.size_bytes(tmp_path / "gone") == 0

    assert layout.sweep_incomplete(torn.parent) == [torn] and not torn.exists()
    assert layout.sweep_incomplete(tmp_path / "nowhere") == []
    assert layout.snapshot_folders(run, include_temporary=True) == complete


def test_sweeping_after_a_frame_makes_way_for_the_snapshots_a_resume_writes_again(tmp_path: Path) -> None:
    """A complete snapshot past the resume's frame may have no registry row (killed between its
    rename and its commit): it goes, with the torn ones; earlier ones and other files stay."""
    folder = tmp_path / "checkpoints"
    for frame in (1000, 2000, 3000):
        make_snapshot(folder / layout.snapshot_name(frame), {layout.META: b"{}"})
    torn = folder / layout.temporary_name(layout.snapshot_name(4000))
    torn.mkdir()
    (folder / "notes.txt").write_text("not a snapshot")
    swept = layout.sweep_after(folder, 2000)
    assert sorted(p.name for p in swept) == sorted([torn.name, layout.snapshot_name(3000)])
    assert sorted(p.name for p in folder.iterdir()) == ["f000000001000", "f000000002000", "notes.txt"]
    assert layout.sweep_after(tmp_path / "nowhere", 0) == []
    assert layout.frame_of("f000000002000") == 2000 and layout.frame_of("notes.txt") is None
    assert layout.frame_of(torn.name) is None and layout.frame_of("f12") is None


def test_verify_catches_a_flipped_byte_a_missing_file_and_a_foreign_hash(tmp_path: Path) -> None:
    folder = tmp_path / "f000000001000"
    sha = make_snapshot(folder, {layout.META: b'{"a": 1}', layout.STATE: bytes(range(256))})
    manifest = layout.verify(folder, sha)
    hashes = {
        layout.META: hashlib.sha256(b'{"a": 1}').hexdigest(),
        layout.STATE: hashlib.sha256(bytes(range(256))).hexdigest(),
    }
    assert manifest == {"format": layout.FORMAT_VERSION, "files": hashes, "logs": {}}

    state = bytearray((folder / layout.STATE).read_bytes())
    state[100] ^= 0x01
    (folder / layout.STATE).write_bytes(bytes(state))
    assert layout.verify(folder, sha, deep=False) == manifest  # the manifest itself is intact
    with pytest.raises(layout.SnapshotError, match=f"{layout.STATE} is missing or altered"):
        layout.verify(folder, sha)
    (folder / layout.STATE).unlink()
    with pytest.raises(layout.SnapshotError, match=f"{layout.STATE} is missing or altered"):
        layout.verify(folder)
    with pytest.raises(layout.SnapshotError, match="does not match the sha256 the registry recorded"):
        layout.verify(folder, "0" * 64, deep=False)
    (folder / layout.MANIFEST).write_bytes(json.dumps({"format": 99, "files": {}}).encode())
    with pytest.raises(layout.SnapshotError, match="has format 99"):
        layout.verify(folder)
    (folder / layout.MANIFEST).unlink()
    with pytest.raises(layout.SnapshotError, match="missing or incomplete"):
        layout.verify(folder)


# ---------------------------------------------------------------------------------------------
# meta.json


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("*.json")))
def test_meta_json_round_trips_through_the_record_byte_for_byte(fixture: str, tmp_path: Path) -> None:
    raw = (FIXTURES / fixture).read_bytes()
    meta = SnapshotMeta.from_json(json.loads(raw))
    assert layout.json_bytes(meta.to_json()) == raw
    assert SnapshotMeta.from_json(meta.to_json()) == meta
    folder = tmp_path / "f1"
    folder.mkdir()
    (folder / layout.META).write_bytes(raw)
    assert layout.read_meta(folder) == meta


def test_the_record_types_what_the_session_reads() -> None:
    captured = SnapshotMeta.from_json(json.loads((FIXTURES / "captured-mid-episode.json").read_bytes()))
    assert isinstance(captured.clock, Clock) and captured.clock.frame == 1234 and captured.kind == "preempt"
    assert isinstance(captured.random, RandomStates) and len(captured.random.python[1]) == 625
    assert captured.best == Best(frame=1000, mean=111.5)
    assert captured.env is not None and captured.env_note is None and any(captured.episode_length)
    async_envs = SnapshotMeta.from_json(json.loads((FIXTURES / "not-captured-async.json").read_bytes()))
    assert async_envs.env is None and async_envs.env_note is not None and "cannot be captured" in async_envs.env_note


def test_a_meta_json_with_a_missing_or_unknown_key_is_refused() -> None:
    data = json.loads((FIXTURES / "captured-mid-episode.json").read_bytes())
    with pytest.raises(TypeError):
        SnapshotMeta.from_json({k: v for k, v in data.items() if k != "obs_dtype"})
    with pytest.raises(TypeError):
        SnapshotMeta.from_json({**data, "surprise": 1})


# ---------------------------------------------------------------------------------------------
# gc's retention setting comes from the real spec


def test_gc_reads_keep_checkpoints_through_the_spec_and_its_default() -> None:
    from rlrun.home.maintenance import _keep_checkpoints
    from rlrun.spec import MetaSpec

    document = builtin_document("reinforce_cartpole")
    unset = {**document, "meta": {k: v for k, v in document["meta"].items() if k != "keep_checkpoints"}}
    assert _keep_checkpoints(json.dumps(unset)) == MetaSpec.model_fields["keep_checkpoints"].default
    lowered = {**document, "meta": {**document["meta"], "keep_checkpoints": 1}}
    assert _keep_checkpoints(json.dumps(lowered)) == 1
    # A spec that no longer validates (or none at all): gc cannot know the rule, so it retires nothing.
    assert _keep_checkpoints(json.dumps({**lowered, "agent": {"algorithm": "gone"}})) is None
    assert _keep_checkpoints("not json") is None and _keep_checkpoints(None) is None
