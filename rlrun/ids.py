"""Run ids: short, typeable, and sorted by creation time.

An id is 7 base32 characters of the creation time in whole seconds followed by 3 random ones, for
example `bk3x9q2m7a`. The alphabet is in ASCII order, so sorting ids as strings sorts them by
creation second; within one second the order is random. It leaves out i, l, o and u so an id read
aloud or off a screen is hard to mistype.
"""

from __future__ import annotations

import secrets
import time

ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
TIME_CHARS = 7
RANDOM_CHARS = 3
ID_LENGTH = TIME_CHARS + RANDOM_CHARS

# Shifting the clock by 10 * 32**6 makes the leading character a letter ('a' is index 10), so an
# id never looks like a row number; the 7 characters last until about the year 2700.
_TIME_OFFSET = 10 * len(ALPHABET) ** (TIME_CHARS - 1)


def _encode(value: int, width: int) -> str:
    """Fixed-width big-endian base32, so string order equals numeric order."""
    if not 0 <= value < len(ALPHABET) ** width:
        raise ValueError(f"{value} does not fit in {width} base32 characters")
    chars = []
    for _ in range(width):
        value, digit = divmod(value, len(ALPHABET))
        chars.append(ALPHABET[digit])
    return "".join(reversed(chars))


def new_run_id(now: float | None = None) -> str:
    """A fresh run id for a run created at `now` (default: the current time)."""
    seconds = int(time.time() if now is None else now)
    random_part = "".join(secrets.choice(ALPHABET) for _ in range(RANDOM_CHARS))
    return _encode(seconds + _TIME_OFFSET, TIME_CHARS) + random_part
