import sys

if sys.argv[1:2] and sys.argv[1] in ("train", "resume"):
    # Before anything else loads: a SIGTERM during start-up stops gracefully (see rlrun.stopping).
    # `main` does the same for the `rlrun` script; this covers `python -m rlrun` a little earlier.
    from rlrun.stopping import defer_signals

    defer_signals()

from rlrun.cli import main

if __name__ == "__main__":  # guarded: spawned session processes re-import the main module
    main()
