"""Registers the test envs (`my_envs`) in every Python process that has this folder on PYTHONPATH:
the `rlrun` subprocesses of tests/test_user_spaces_networks.py and the sessions they spawn."""

import my_envs  # noqa: F401
