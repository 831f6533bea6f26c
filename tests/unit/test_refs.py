"""Run-reference grammar: every accepted form, and a clear error for each malformed one."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from rlrun.errors import BadInput, RunReferenceError
from rlrun.refs import STATUSES, RunFilter, RunRef, check_run_name, like_pattern, parse_ref, parse_since


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("latest", RunRef("latest", offset=0)),
        ("latest~0", RunRef("latest", offset=0)),
        ("latest~1", RunRef("latest", offset=1)),
        ("latest~12", RunRef("latest", offset=12)),
        ("latest~", RunRef("latest", offset=1)),
        ("3", RunRef("row", row=3)),
        ("042", RunRef("row", row=42)),
        ("bk3x9q2m7a", RunRef("token", token="bk3x9q2m7a")),
        ("bk3", RunRef("token", token="bk3")),
        ("my-run_v2.1", RunRef("token", token="my-run_v2.1")),
        ("latestish", RunRef("token", token="latestish")),
        ("  latest  ", RunRef("latest")),
    ],
)
def test_run_part(text: str, expected: RunRef) -> None:
    assert parse_ref(text) == expected


@pytest.mark.parametrize(
    ("text", "session", "checkpoint"),
    [
        ("latest/s2", 2, None),
        ("latest/S0", 0, None),
        ("bk3@best", None, "best"),
        ("bk3@latest", None, "latest"),
        ("3@5M", None, "5000000"),
        ("3@1.5M", None, "1500000"),
        ("3@500k", None, "500000"),
        ("3@2e6", None, "2000000"),
        ("3@20_000", None, "20000"),
        ("3@12000", None, "12000"),
        ("latest~1/s1@best", 1, "best"),
        ("latest~1@best/s1", 1, "best"),
    ],
)
def test_suffixes(text: str, session: int | None, checkpoint: str | None) -> None:
    ref = parse_ref(text)
    assert (ref.session, ref.checkpoint) == (session, checkpoint)


def test_suffixes_keep_the_run_part() -> None:
    ref = parse_ref("latest~2/s1@5M")
    assert (ref.kind, ref.offset, ref.session, ref.checkpoint) == ("latest", 2, 1, "5000000")
    assert ref.checkpoint_frame == 5_000_000
    assert parse_ref("my-run@best").token == "my-run"
    assert parse_ref("my-run@best").checkpoint_frame is None


@pytest.mark.parametrize("text", ["latest", "latest~2", "7", "bk3", "latest~1/s1@best", "bk3@5000000", "run/s0"])
def test_str_is_canonical(text: str) -> None:
    assert str(parse_ref(text)) == text


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "it is empty"),
        ("   ", "it is empty"),
        ("0", "rows start at 1"),
        ("latest~x", "`latest~` must be followed by a number"),
        ("latest~-1", "`latest~` must be followed by a number"),
        ("/s1", "no run named before the suffix"),
        ("@best", "no run named before the suffix"),
        ("bk3/2", "session suffix '/2' is not /s0, /s1"),
        ("bk3/s", "session suffix '/s' is not /s0, /s1"),
        ("bk3/sx", "session suffix '/sx'"),
        ("bk3@", "checkpoint '@' is not @best, @latest or a frame count"),
        ("bk3@worst", "checkpoint '@worst' is not @best"),
        ("bk3@-5M", "checkpoint '@-5M'"),
        ("bk3@1.5", "checkpoint '@1.5'"),
        ("bk3/s1/s2", "'/' appears twice"),
        ("bk3@best@latest", "'@' appears twice"),
        ("run name", "has characters a run id or name cannot have"),
        ("-run", "has characters"),
        ("run#1", "has characters"),
    ],
)
def test_bad_syntax(text: str, problem: str) -> None:
    with pytest.raises(RunReferenceError) as caught:
        parse_ref(text)
    message = str(caught.value)
    assert problem in message
    assert "\n" not in message
    assert f"bad run reference {text!r}" in message
    assert "latest~N" in message  # the accepted forms are named


def test_reference_errors_are_bad_input() -> None:
    with pytest.raises(BadInput):
        parse_ref("0")


@pytest.mark.parametrize("name", ["baseline", "dqn-pong.v2", "run_1", "2024-sweep"])
def test_good_run_names(name: str) -> None:
    assert check_run_name(name) == name


@pytest.mark.parametrize("name", ["latest", "latest~1", "12", "a/s1", "a@best", "a b", ""])
def test_names_that_would_not_read_back(name: str) -> None:
    with pytest.raises(BadInput, match="cannot be used"):
        check_run_name(name)


# ---- filters ---------------------------------------------------------------------------------

NOW = 1_750_000_000.0


@pytest.mark.parametrize(
    ("text", "seconds_back"),
    [("90s", 90), ("30m", 1800), ("12h", 43200), ("2d", 172800), ("1w", 604800), ("1.5d", 129600), (" 2D ", 172800)],
)
def test_since_durations(text: str, seconds_back: float) -> None:
    assert parse_since(text, now=NOW) == NOW - seconds_back


def test_since_dates_are_local_times() -> None:
    assert parse_since("2025-05-01") == datetime(2025, 5, 1).timestamp()
    assert parse_since("2025-05-01T09:30") == datetime(2025, 5, 1, 9, 30).timestamp()


@pytest.mark.parametrize("text", ["2", "two days", "2y", "-2d", "2025-13-01", ""])
def test_bad_since_is_one_line_naming_the_forms(text: str) -> None:
    with pytest.raises(BadInput) as caught:
        parse_since(text)
    message = str(caught.value)
    assert message.startswith(f"--since {text!r} is not a time") and "2d" in message and "2025-05-01" in message
    assert "\n" not in message


def test_filter_from_options() -> None:
    chosen = RunFilter.of(
        status="crashed",
        algorithm="ppo",
        env="CartPole-v1",
        spec="ppo_cartpole",
        name="sweep-*",
        since="2d",
        sort="best",
        now=NOW,
    )
    assert chosen.since == NOW - 172800 and chosen.narrows
    assert chosen.describe() == (
        "--status crashed --algo ppo --env CartPole-v1 --spec ppo_cartpole --name sweep-* --since 2d --sort best"
    )
    assert RunFilter.of() == RunFilter() and not RunFilter().narrows and RunFilter().describe() == ""
    assert not RunFilter.of(sort="frames").narrows  # sorting leaves every run in
    assert RunFilter.of(sort="frames").describe() == "--sort frames"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"status": "finshed"},
            "--status 'finshed' is not a run status (did you mean 'finished'?); use one of running,",
        ),
        ({"status": "done"}, "--status 'done' is not a run status; use one of running, finished, failed, preempted"),
        (
            {"sort": "bset"},
            "--sort 'bset' is not a sort order (did you mean 'best'?); use one of started, best, frames",
        ),
        ({"since": "yesterday"}, "--since 'yesterday' is not a time"),
    ],
)
def test_bad_filter_values(options: dict[str, str], message: str) -> None:
    with pytest.raises(BadInput) as caught:
        RunFilter.of(**options)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("glob", "pattern"),
    [("sweep-*", "sweep-%"), ("run?", "run_"), ("a_b", "a\\_b"), ("100%", "100\\%"), ("back\\slash", "back\\\\slash")],
)
def test_name_globs_become_escaped_like_patterns(glob: str, pattern: str) -> None:
    assert like_pattern(glob) == pattern


def test_the_filter_statuses_are_the_registry_s() -> None:
    from rlrun.registry import LISTED_RUN_STATUSES

    assert set(STATUSES) == set(LISTED_RUN_STATUSES)


# ---- paths -----------------------------------------------------------------------------------


@pytest.fixture
def run_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A run folder `runs/abc` (run.json, session s1 with one checkpoint), the cwd its parent's parent."""
    folder = tmp_path / "runs" / "abc"
    (folder / "s1" / "checkpoints" / "f000000050000").mkdir(parents=True)
    (folder / "run.json").write_text("{}")
    (folder / "s1" / "checkpoints" / "f000000050000" / "meta.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    return folder


@pytest.mark.parametrize(
    ("text", "session", "checkpoint"),
    [
        ("runs/abc", None, None),
        ("runs/abc/", None, None),
        ("./runs/abc", None, None),
        ("runs/abc/run.json", None, None),
        ("runs/abc/s1", 1, None),
        ("runs/abc/s1/checkpoints", 1, None),
        ("runs/abc/s1/checkpoints/f000000050000", 1, "50000"),
        ("runs/abc/s1/checkpoints/f000000050000/meta.json", 1, "50000"),
        ("runs/abc@best", None, "best"),
        ("./runs/abc/s1@50k", 1, "50000"),
    ],
)
def test_paths_name_their_run_folder_session_and_checkpoint(
    run_folder: Path, text: str, session: int | None, checkpoint: str | None
) -> None:
    for form in (text, str(Path.cwd() / text)):  # relative and absolute
        assert parse_ref(form) == RunRef("path", path=str(run_folder), session=session, checkpoint=checkpoint)


def test_a_path_prints_as_its_run_folder(run_folder: Path) -> None:
    ref = parse_ref("runs/abc/s1/checkpoints/f000000050000")
    assert str(ref) == f"{run_folder}/s1@50000" and ref.base == str(run_folder)


def test_a_text_that_reads_as_a_reference_is_one_even_when_a_folder_has_its_name(
    run_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(run_folder.parent)  # ./abc/s1 exists here
    assert parse_ref("abc/s1") == RunRef("token", token="abc", session=1)
    assert parse_ref("abc") == RunRef("token", token="abc")
    assert parse_ref("./abc/s1") == RunRef("path", path=str(run_folder), session=1)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("./nowhere", "no file or folder './nowhere' exists"),
        ("runs/nope", "no file or folder 'runs/nope' exists, and as a run reference: session suffix '/nope'"),
        ("runs", "is not a run folder, nor a session or checkpoint folder in one (no run.json)"),
        ("./runs/abc/s1/checkpoints/f000000050000@best", "a checkpoint folder already names its checkpoint"),
        ("./runs/abc@worst", "checkpoint '@worst' is not @best"),
    ],
)
def test_bad_paths(run_folder: Path, text: str, problem: str) -> None:
    (run_folder.parent.parent / "runs" / "placeholder").mkdir()  # `runs/` exists, so `runs` alone is a path
    with pytest.raises(RunReferenceError) as caught:
        parse_ref(text if text != "runs" else "./runs")
    message = str(caught.value)
    assert problem in message and "\n" not in message
    assert "path of a run, session or checkpoint folder" in message  # the accepted forms name paths


def test_of_is_the_spec_name_filter_and_messages_name_it() -> None:
    chosen = RunFilter.of(of="reinforce_cartpole")
    assert chosen.spec == "reinforce_cartpole" and chosen.narrows
    assert chosen.describe() == "--of reinforce_cartpole"
    assert RunFilter.of(spec="ppo_cartpole").describe() == "--spec ppo_cartpole"
    assert RunFilter.of(of="a", spec="A").spec == "a"  # the same spec twice is fine
    with pytest.raises(BadInput, match="--of a and --spec b name different specs"):
        RunFilter.of(of="a", spec="b")
