"""How commands speak: a line for the person at the terminal on stderr, Rich's console for
training (loaded on use), JSON alone on stdout (`--json`)."""

import json
import sys
from typing import Any


def make_console() -> Any:
    from rlrun.cli.display import stderr_console

    return stderr_console()


def say(text: str) -> None:
    """A line for the person at the terminal (stderr: stdout is kept for --json)."""
    sys.stderr.write(text + "\n")


def print_json(document: Any) -> None:
    sys.stdout.write(json.dumps(document, indent=2) + "\n")
