"""A user's envs that rlrun must refuse, each with one line (tests/test_bad_input.py)."""
