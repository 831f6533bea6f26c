import sys

# Guarded: spawned session processes import this module too (as __mp_main__, with the parent's argv).
if __name__ == "__main__":
    # Before anything else loads: a SIGTERM during start-up stops gracefully (see rlrun.session.stopping).
    # `rlrun.cli.main` does the same for the `rlrun` script; this covers `python -m rlrun` sooner.
    from rlrun.session.stopping import defer_signals_for

    defer_signals_for(sys.argv[1:])

    from rlrun.cli import main

    main()
