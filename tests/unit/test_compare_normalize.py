"""`rlrun compare --normalize`: which env gets which scale (issue 41). Standard library and the
tables only; the comparisons themselves are tests/test_compare.py's."""

from __future__ import annotations

import pytest

from rlrun.compare import normalize


@pytest.mark.parametrize(
    ("env_id", "game"),
    [
        ("ALE/Pong-v5", "Pong"),
        ("PongNoFrameskip-v4", "Pong"),
        ("ALE/MsPacman-v5", "MsPacman"),
        ("BreakoutNoFrameskip-v4", "Breakout"),
        ("ALE/KungFuMaster-v5", "KungFuMaster"),
        ("CartPole-v1", None),
        ("ALE/Tetris-v5", None),
    ],
)
def test_atari_games_are_read_from_their_env_ids(env_id: str, game: str | None) -> None:
    assert normalize.atari_game(env_id) == game


def test_human_normalised_is_zero_at_random_and_one_at_human() -> None:
    scale = normalize.scale("ALE/Pong-v5", "human")
    assert scale is not None
    assert scale.apply(-20.7) == 0.0 and scale.apply(14.6) == 1.0
    assert normalize.ATARI_HUMAN.keys() == normalize.ATARI_RANDOM.keys() and len(normalize.ATARI_HUMAN) == 26


def test_minmax_uses_the_known_range_and_an_unknown_env_stays_raw() -> None:
    scale = normalize.scale("CartPole-v1", "minmax")
    assert scale is not None and scale.apply(500.0) == 1.0 and scale.apply(0.0) == 0.0
    assert normalize.scale("LunarLander-v3", "minmax") is None
    assert "no known range" in normalize.missing_reason("LunarLander-v3", "minmax")
    assert normalize.scale("CartPole-v1", "human") is None and normalize.scale("CartPole-v1", "none") is None
