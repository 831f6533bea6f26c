"""Which image files rlrun's figures are written to (`rlrun plot -o`, `rlrun compare -o`): one
rule, checked before any work so a wrong name costs nothing."""

from __future__ import annotations

from pathlib import Path

from rlrun.errors import BadInput

FORMATS = (".png", ".svg", ".pdf")
"""The file types matplotlib's headless renderer writes here."""


def check_output(output: Path) -> None:
    """Refuse, before any work, a file type matplotlib will not write here or a missing folder."""
    if output.suffix.lower() not in FORMATS:
        raise BadInput(
            f"-o {output}: cannot write a {output.suffix or 'file without an extension'};"
            f" use a {', '.join(FORMATS)} file"
        )
    if not output.parent.is_dir():
        raise BadInput(f"-o {output}: folder {output.parent} does not exist; create it or write elsewhere")
