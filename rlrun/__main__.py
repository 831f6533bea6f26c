from rlrun.cli import main

if __name__ == "__main__":  # guarded: spawned session processes re-import the main module
    main()
