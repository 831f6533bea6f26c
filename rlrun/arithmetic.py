"""The revisions of rlrun's learning arithmetic (`meta.arithmetic`, documented there): the one new
runs take, and the one a spec recorded before the setting existed trained with. Light (no pydantic,
no torch), so `rlrun show` can print a recorded spec with its revision made explicit."""

from __future__ import annotations

from typing import Any

ARITHMETIC = 3
"""The newest revision of the learning arithmetic, which new runs use."""
ARITHMETIC_BEFORE_RECORDED = 1
"""The revision of a spec recorded before `meta.arithmetic` existed."""


def as_recorded_document(document: dict[str, Any]) -> dict[str, Any]:
    """A recorded spec document with the arithmetic it trained with made explicit: a document
    recorded before the setting existed gets revision 1, whatever the default is now. The record
    itself is left as it was (a copy is returned when anything changes)."""
    meta = document.get("meta")
    if not isinstance(meta, dict) or "arithmetic" in meta:
        return document
    return {**document, "meta": {**meta, "arithmetic": ARITHMETIC_BEFORE_RECORDED}}
