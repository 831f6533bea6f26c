"""Runs that travel (`rlrun push`, `rlrun pull`, rlrun.home.bundle): a DQN run pushed half-way (its
replay memory in its snapshots) to a file and to an S3 server on loopback, pulled into a fresh home
and resumed, is the uninterrupted run bit for bit; a damaged, altered or hostile bundle is refused
with one line, exit 2, and nothing written."""

from __future__ import annotations

import io
import json
import tarfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from helpers import Result, builtin_for, environment, heavy_modules, invoke
from same_run import assert_same_run, final_state, reference_state, resume_ok, train

from rlrun.home import bundle

pytestmark = pytest.mark.slow  # real (tiny) trainings

SPEC = builtin_for("dqn")
HALF, FULL = 2000, 4000


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The uninterrupted run, trained once per test run and shared (`reference_state`)."""
    return reference_state(tmp_path_factory, SPEC, "--frames", str(FULL))


@pytest.fixture(scope="module")
def pushed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same run trained half-way in a home of its own, pushed to a bundle file."""
    folder = tmp_path_factory.mktemp("travel")
    home = folder / "origin"
    assert train(home, SPEC, "--frames", str(HALF)).code == 0
    done = invoke(home, "push", "latest", str(folder / "run.rlrun"))
    assert done.code == 0, done.stderr
    assert "sha256 " in done.stderr
    return folder / "run.rlrun"


def _one_line_refusal(done: Result, *words: str, code: int = 2) -> None:
    assert done.code == code, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


def test_a_pulled_run_resumes_exactly_from_a_file(pushed: Path, straight: dict[str, Any], tmp_path: Path) -> None:
    home = tmp_path / "elsewhere"
    with tarfile.open(pushed) as tar:
        names = tar.getnames()
    assert names[:2] == [bundle.MANIFEST, bundle.MANIFEST_HASH]
    assert any("/logs/" in name for name in names), "the replay memory travels with the snapshots"
    pulled = invoke(home, "pull", str(pushed), "--json")
    assert pulled.code == 0, pulled.stderr
    run_id = pulled.json()["run"]["id"]
    assert not [p for p in home.iterdir() if p.name.startswith(".")], "the staging folder is gone"
    again = invoke(home, "pull", str(pushed))
    _one_line_refusal(again, f"run {run_id} is already in")
    resume_ok(home, run_id, "--frames", str(FULL))
    assert_same_run(straight, final_state(home))
    # And enjoys as the original (pulled into a home of its own: enjoy records an evaluation; the
    # original's folder read where it is, recorded nowhere).
    enjoying = tmp_path / "enjoying"
    assert invoke(enjoying, "pull", str(pushed)).code == 0
    pulled_copy = invoke(enjoying, "enjoy", run_id, "--episodes", "2", "--json")
    original = invoke(enjoying, "enjoy", str(pushed.parent / "origin" / run_id), "--episodes", "2", "--json")
    assert pulled_copy.code == original.code == 0, pulled_copy.stderr + original.stderr
    assert pulled_copy.json()["episodes"] == original.json()["episodes"]


def test_push_to_s3_and_pull_into_a_fresh_home_resumes_exactly(
    pushed: Path, straight: dict[str, Any], s3_bucket: str, tmp_path: Path
) -> None:
    origin = pushed.parent / "origin"
    url = f"s3://{s3_bucket}/{uuid.uuid4().hex[:8]}/shared/"
    done = invoke(origin, "push", "latest", url, "--json")
    assert done.code == 0, done.stderr
    sent = done.json()
    assert sent["destination"] == f"{url}{sent['run']['id']}{bundle.SUFFIX}"
    home = tmp_path / "fresh"
    wrong = invoke(home, "pull", sent["destination"], "--sha256", "0" * 64)
    _one_line_refusal(wrong, "sha256")
    assert not home.exists(), "nothing written"
    pulled = invoke(home, "pull", sent["destination"], "--sha256", sent["sha256"])
    assert pulled.code == 0, pulled.stderr
    resume_ok(home, "latest", "--frames", str(FULL))
    assert_same_run(straight, final_state(home))
    missing = invoke(tmp_path / "other", "pull", f"{url}nothing.rlrun")
    _one_line_refusal(missing, "no such bundle")


def _member_offsets(path: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(path) as tar:
        return {member.name: member for member in tar.getmembers()}


def _damaged_copies(pushed: Path, folder: Path) -> dict[str, Path]:
    """The bundle with one byte of a snapshot's state changed, with a manifest that no longer
    matches its hash, cut short in a file, and cut short between files."""
    raw = pushed.read_bytes()
    members = _member_offsets(pushed)
    state = next(m for name, m in members.items() if name.endswith("state.pt"))
    manifest = members[bundle.MANIFEST]
    last = list(members.values())[-1]
    copies = {}

    def changed(name: str, data: bytes) -> None:
        copies[name] = folder / f"{name}.rlrun"
        copies[name].write_bytes(data)

    flipped = bytearray(raw)
    flipped[state.offset_data + state.size // 2] ^= 0x01
    changed("altered-file", bytes(flipped))
    edited = bytearray(raw)
    text = raw[manifest.offset_data : manifest.offset_data + manifest.size]
    at = manifest.offset_data + text.index(b'"sha256": "') + len(b'"sha256": "')
    edited[at] = ord("0") if edited[at] != ord("0") else ord("1")
    changed("altered-manifest", bytes(edited))
    changed("cut-in-a-file", raw[: state.offset_data + state.size // 2])
    changed("cut-between-files", raw[: last.offset])
    changed("not-a-tar", b"hello\n" * 100)
    return copies


def test_a_damaged_or_altered_bundle_is_refused_and_nothing_is_written(pushed: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    for name, copy in _damaged_copies(pushed, tmp_path).items():
        done = invoke(home, "pull", str(copy))
        _one_line_refusal(done, "nothing pulled" if name != "not-a-tar" else "not an rlrun bundle")
        assert not home.exists(), f"{name}: something was written"


def _hostile(folder: Path, member: tarfile.TarInfo, listed: str, payload: bytes = b"") -> Path:
    """A bundle whose manifest is sound and lists `listed`, followed by `member`."""
    document = {
        "format": bundle.FORMAT,
        "kind": bundle.KIND,
        "run": {"id": "abc"},
        "links": [],
        "files": [{"name": listed, "sha256": "0" * 64, "size": len(payload), "mtime": 0}],
    }
    manifest = json.dumps(document).encode()
    import hashlib

    path = folder / f"hostile-{uuid.uuid4().hex[:6]}.rlrun"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in (
            (bundle.MANIFEST, manifest),
            (bundle.MANIFEST_HASH, hashlib.sha256(manifest).hexdigest().encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        tar.addfile(member, io.BytesIO(payload) if member.isreg() else None)
    return path


def test_links_and_names_outside_the_run_folder_are_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    link = tarfile.TarInfo("abc/run.json")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    hard = tarfile.TarInfo("abc/run.json")
    hard.type, hard.linkname = tarfile.LNKTYPE, "../../outside"
    escape = tarfile.TarInfo("abc/../../outside")
    absolute = tarfile.TarInfo("/tmp/outside")
    cases = [
        (link, "abc/run.json", "not a plain file"),
        (hard, "abc/run.json", "not a plain file"),
        (escape, "abc/x", "outside its run folder"),
        (absolute, "abc/x", "outside its run folder"),
        (tarfile.TarInfo("abc/extra"), "abc/x", "does not list"),
    ]
    for member, listed, words in cases:
        _one_line_refusal(invoke(home, "pull", str(_hostile(tmp_path, member, listed))), words)
        assert not home.exists()
    assert not (tmp_path / "outside").exists()


def test_bad_input_is_one_line(pushed: Path, tmp_path: Path) -> None:
    origin = pushed.parent / "origin"
    _one_line_refusal(invoke(tmp_path / "h", "pull", str(tmp_path / "nothing.rlrun")), "no such bundle file")
    _one_line_refusal(invoke(origin, "push", "latest", str(tmp_path / "no" / "such" / "x.rlrun")), "does not exist")
    _one_line_refusal(invoke(origin, "push", "latest", "nosuch://bucket/x.rlrun"), "nosuch://")
    _one_line_refusal(invoke(origin, "push", "latest@best", str(tmp_path / "x.rlrun")), "whole runs")
    unreachable = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:1",
        "AWS_ACCESS_KEY_ID": "rlrun",
        "AWS_SECRET_ACCESS_KEY": "rlrun",
        "AWS_MAX_ATTEMPTS": "1",
    }
    pytest.importorskip("s3fs")
    _one_line_refusal(
        invoke(tmp_path / "h", "pull", "s3://nobucket/x.rlrun", env=unreachable), "cannot be reached", code=3
    )
    assert not (tmp_path / "h").exists()


def test_push_and_pull_import_neither_torch_nor_gymnasium(pushed: Path, tmp_path: Path) -> None:
    origin = pushed.parent / "origin"
    assert heavy_modules(origin, "push", "latest", str(tmp_path / "x.rlrun")) == ""
    for heavy in ("torch", "gymnasium"):
        assert heavy not in heavy_modules(tmp_path / "fresh", "pull", str(pushed)).split(",")


def _bundled(path: Path) -> dict[str, str]:
    """Each file a bundle holds (links as the file they link to) and its sha256, run.json aside."""
    with tarfile.open(path) as tar:
        manifest = json.loads(tar.extractfile(bundle.MANIFEST).read())  # type: ignore[union-attr]
    files = {entry["name"]: entry["sha256"] for entry in manifest["files"]}
    files.update({name: files[original] for name, original in manifest["links"]})
    return {name: digest for name, digest in files.items() if not name.endswith("/run.json")}


def test_a_run_of_a_home_in_object_storage_pushes_whole(pushed: Path, s3_bucket: str, tmp_path: Path) -> None:
    """Pushed from a working copy that holds none of it: every file comes down from the store, the
    replay memory's segments (shared by reference there) into each snapshot's logs/."""
    import shutil

    from helpers import store_home

    run_id = _bundled_run(pushed)
    home = store_home(f"s3://{s3_bucket}/{uuid.uuid4().hex[:8]}/runs", tmp_path / "store")
    copied = tmp_path / "copied" / run_id
    shutil.copytree(pushed.parent / "origin" / run_id, copied)
    assert invoke(home, "import", str(copied)).code == 0
    shutil.rmtree(home / run_id)  # the store holds the run now; this working copy, nothing of it
    done = invoke(home, "push", run_id, str(tmp_path / "again.rlrun"))
    assert done.code == 0, done.stderr
    assert _bundled(tmp_path / "again.rlrun") == _bundled(pushed)


def _bundled_run(path: Path) -> str:
    with tarfile.open(path) as tar:
        return str(json.loads(tar.extractfile(bundle.MANIFEST).read())["run"]["id"])  # type: ignore[union-attr]


def test_a_run_pulled_into_a_home_in_object_storage_is_in_the_store(
    pushed: Path, s3_bucket: str, tmp_path: Path
) -> None:
    """Into a home in object storage: every snapshot and file goes to the store before the registry hears of it."""
    import shutil

    from helpers import store_home
    from same_run import assert_snapshots_sound

    home = store_home(f"s3://{s3_bucket}/{uuid.uuid4().hex[:8]}/runs", tmp_path / "store")
    done = invoke(home, "pull", str(pushed), "--json")
    assert done.code == 0, done.stderr
    shutil.rmtree(home / done.json()["run"]["id"])  # what follows reads the store
    with environment(home):
        assert_snapshots_sound(home)
