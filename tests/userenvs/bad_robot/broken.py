"""A module that does not import: it needs a package that is not installed."""

import servo_driver  # noqa: F401
