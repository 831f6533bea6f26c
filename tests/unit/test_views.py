"""The plain-text views of `rlrun ls` and `show`, on records built here: formatters, sparklines, tables."""

from __future__ import annotations

import csv
import io
from datetime import datetime

import pytest

from rlrun.catalog.scores import score
from rlrun.cli.views import (
    SPARKS,
    Cell,
    duration,
    format_bytes,
    resolved,
    runs_csv,
    runs_table,
    sparkline,
    status_cell,
    table,
    when,
)
from rlrun.registry import RunRecord, RunSummary

NOON = datetime(2025, 5, 1, 12, 0).timestamp()


def summary(row: int, run_id: str, status: str = "finished", **fields: object) -> RunSummary:
    values: dict[str, object] = dict(
        row=row,
        id=run_id,
        name=None,
        spec_name="ppo_cartpole",
        algorithm="ppo",
        env_id="CartPole-v1",
        status=status,
        num_sessions=1,
        frames_done=20_000,
        frames_target=100_000,
        session_frame=20_000,
        best_eval=187.25,
        created_at=NOON,
        finished_at=NOON + 95,
    )
    values.update(fields)
    return RunSummary(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "-"),
        (float("nan"), "-"),
        (float("inf"), "-"),
        (12.345, "12.35"),
        (-0.04, "-0.04"),
        (500.0, "500.0"),
        (12345.6, "12345.6"),
    ],
)
def test_score(value: float | None, text: str) -> None:
    assert score(value) == text


@pytest.mark.parametrize(
    ("seconds", "text"), [(None, "-"), (-1, "-"), (0, "0m00s"), (95.9, "1m35s"), (3600 * 2 + 61, "2h01m")]
)
def test_duration(seconds: float | None, text: str) -> None:
    assert duration(seconds) == text


@pytest.mark.parametrize(
    ("count", "text"),
    [(0, "0 bytes"), (999, "999 bytes"), (1536, "1.5 kB"), (2_500_000, "2.5 MB"), (3 * 10**9, "3.0 GB")],
)
def test_format_bytes(count: int, text: str) -> None:
    assert format_bytes(count) == text


def test_when_is_local_minutes() -> None:
    assert when(NOON) == "2025-05-01 12:00" and when(None) == "-"


def test_sparkline_spans_lowest_to_highest() -> None:
    assert sparkline([]) == ""
    assert sparkline([0, 7, 14]) == SPARKS[0] + SPARKS[4] + SPARKS[7]
    assert sparkline([5.0, 5.0]) == SPARKS[3] * 2


def test_a_long_sparkline_keeps_the_first_and_the_last() -> None:
    line = sparkline([0.0] + [1.0] * 98 + [2.0], width=10)
    assert len(line) == 10 and line[0] == SPARKS[0] and line[-1] == SPARKS[-1]


def test_table_pads_columns_and_right_aligns() -> None:
    text = table(("a", "num"), [["xyz", "1"], [Cell("q", "32"), "100"]], right=("num",), title="T")
    assert text.splitlines() == ["T", "a    num", "xyz    1", "q    100"]


def test_table_colours_only_styled_cells_when_asked() -> None:
    text = table(("s",), [[status_cell("failed")]], colour=True)
    assert "\x1b[31mfailed\x1b[0m" in text
    assert "\x1b" not in table(("s",), [[status_cell("failed")]])


def test_runs_table_rows_and_title() -> None:
    runs = [
        summary(1, "k3ab", name="alpha", training_seconds=95),
        summary(2, "bq9z", status="running", finished_at=None, training_seconds=3 * 3600),
    ]
    lines = runs_table(runs, total=5, filters="--algo ppo").splitlines()
    assert lines[0] == "2 of 5 runs matching --algo ppo"
    assert lines[1].split() == [
        "#",
        "id",
        "name",
        "spec",
        "algorithm",
        "env",
        "status",
        "sessions",
        "frames",
        "best",
        "eval",
        "started",
        "training",
    ]
    assert lines[2].split() == [
        "1",
        "k3ab",
        "alpha",
        "ppo_cartpole",
        "ppo",
        "CartPole-v1",
        "finished",
        "1",
        "20k/100k",
        "187.2",
        "2025-05-01",
        "12:00",
        "1m35s",
    ]
    assert lines[3].split()[-1] == "3h00m"


def test_runs_table_shows_per_session_frames_and_training_time() -> None:
    """Issue 27.7: two sessions of a 30k target, one at 30k, one at 24k, trained 28 s over two
    minutes: the slowest session against the per-session target, and the 28 s."""
    run = summary(
        1,
        "k3ab",
        num_sessions=2,
        frames_done=54_000,
        frames_target=60_000,
        session_frame=24_000,
        training_seconds=28.4,
        finished_at=NOON + 111,
    )
    row = runs_table([run], total=1).splitlines()[1].split()
    assert row[6:8] == ["2", "24k/30k"] and row[-1] == "0m28s"  # (the empty name column splits away)


def test_runs_table_without_filters_has_no_title() -> None:
    assert runs_table([summary(1, "k3ab")], total=1).splitlines()[0].startswith("#")


def test_runs_csv_has_the_json_fields_and_iso_times() -> None:
    rows = list(csv.DictReader(io.StringIO(runs_csv([summary(1, "k3ab", finished_at=None)]))))
    assert list(rows[0]) == [*RunSummary._fields, "phase"] == list(summary(1, "k3ab").to_json())
    assert rows[0]["phase"] == "" and rows[0]["offline_updates"] == "0"  # a run that learns from no dataset
    assert rows[0]["id"] == "k3ab" and rows[0]["finished_at"] == ""
    assert datetime.fromisoformat(rows[0]["created_at"]).timestamp() == NOON


def test_resolved_names_the_run() -> None:
    run = RunRecord(
        "k3ab",
        "alpha",
        "ppo_cartpole",
        "ppo",
        "CartPole-v1",
        "finished",
        100_000,
        1,
        0,
        None,
        None,
        None,
        None,
        NOON,
        None,
    )
    assert resolved(run, "latest") == "latest → run k3ab (alpha), ppo_cartpole, finished"
