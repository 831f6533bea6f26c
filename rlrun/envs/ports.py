"""Exact ports: Gymnasium envs stepped by code that gives the very same bits, faster.

Gymnasium's Acrobot integrates its physics with NumPy on arrays of five numbers (`rk4` calling
`_dsdt` four times a step): half of a PPO run's time on Acrobot-v1 went there, in NumPy's per-call
overhead, not in arithmetic. `ExactAcrobot` does the same arithmetic on Python floats: every
operation in Gymnasium's order (IEEE doubles round the same in NumPy and in Python), `math.sin` and
`math.cos` where Gymnasium calls NumPy's (checked once per process to give NumPy's bits, see
`_math_is_numpy`), the same state array (float64, shape (4,)), observation (float32), reward, flags
and info, and no extra attribute, so a snapshot captures it as it captures Gymnasium's own env and
either restores into the other. Its reset is Gymnasium's.

One rule (`use_exact_ports`) decides: a base env that is exactly Gymnasium's `AcrobotEnv` (not a
subclass) with every parameter the port assumes at its default gets the port; any other env, a
user's subclass or a changed parameter keeps Gymnasium's code. tests/unit/test_env_ports.py checks
the port against Gymnasium bit for bit over random episodes.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.acrobot import AcrobotEnv

# Gymnasium's AcrobotEnv's parameters, as the port hard-codes them (the rule checks each).
_ACROBOT_DEFAULTS = {
    "dt": 0.2,
    "LINK_LENGTH_1": 1.0,
    "LINK_LENGTH_2": 1.0,
    "LINK_MASS_1": 1.0,
    "LINK_MASS_2": 1.0,
    "LINK_COM_POS_1": 0.5,
    "LINK_COM_POS_2": 0.5,
    "LINK_MOI": 1.0,
    "MAX_VEL_1": 4 * np.pi,
    "MAX_VEL_2": 9 * np.pi,
    "AVAIL_TORQUE": [-1.0, 0.0, +1],
    "torque_noise_max": 0.0,
    "book_or_nips": "book",
}
_PI = np.pi  # Gymnasium's `pi` (NumPy's), the same double as math.pi
_HALF_PI = _PI / 2.0

# Gymnasium's constants, and the constant leading factors of its expressions computed as its
# expressions compute them (left to right): each step below then rounds where Gymnasium's does.
_M1 = _M2 = _L1 = _I1 = _I2 = 1.0
_LC1 = _LC2 = 0.5
_G = 9.8
_D1_HEAD, _D1_LINKS, _D1_COS = _M1 * _LC1**2, _L1**2 + _LC2**2, 2 * _L1 * _LC2
_D2_HEAD, _D2_COS = _LC2**2, _L1 * _LC2
_PHI2 = _M2 * _LC2 * _G
_PHI1_A, _PHI1_B, _PHI1_C = -_M2 * _L1 * _LC2, 2 * _M2 * _L1 * _LC2, (_M1 * _LC1 + _M2 * _L1) * _G
_DD2_D, _DD2_DEN = _M2 * _L1 * _LC2, _M2 * _LC2**2 + _I2


def _acrobot_derivatives(
    a: float, theta1: float, theta2: float, dtheta1: float, dtheta2: float
) -> tuple[float, float, float, float]:
    """Gymnasium's `AcrobotEnv._dsdt` ("book" dynamics) on floats, operation for operation (the
    order of the operations is the order of the roundings; its lines are quoted above each), the
    constant factors that lead a product computed once; the torque's derivative, 0, left out."""
    cos2, sin2 = math.cos(theta2), math.sin(theta2)
    # d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * cos(theta2)) + I1 + I2
    d1 = _D1_HEAD + _M2 * (_D1_LINKS + _D1_COS * cos2) + _I1 + _I2
    # d2 = m2 * (lc2**2 + l1 * lc2 * cos(theta2)) + I2
    d2 = _M2 * (_D2_HEAD + _D2_COS * cos2) + _I2
    # phi2 = m2 * lc2 * g * cos(theta1 + theta2 - pi / 2.0)
    phi2 = _PHI2 * math.cos(theta1 + theta2 - _HALF_PI)
    # phi1 = -m2 * l1 * lc2 * dtheta2**2 * sin(theta2) - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin(theta2)
    #        + (m1 * lc1 + m2 * l1) * g * cos(theta1 - pi / 2) + phi2
    phi1 = (
        _PHI1_A * dtheta2**2 * sin2 - _PHI1_B * dtheta2 * dtheta1 * sin2 + _PHI1_C * math.cos(theta1 - _HALF_PI) + phi2
    )
    # ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * sin(theta2) - phi2)
    #            / (m2 * lc2**2 + I2 - d2**2 / d1)
    ddtheta2 = (a + d2 / d1 * phi1 - _DD2_D * dtheta1**2 * sin2 - phi2) / (_DD2_DEN - d2**2 / d1)
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return dtheta1, dtheta2, ddtheta1, ddtheta2


class ExactAcrobot(AcrobotEnv):
    """Gymnasium's Acrobot with `step` on Python floats: the same bits (module note)."""

    def step(self, a: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        s = self.state
        assert s is not None, "Call reset before using AcrobotEnv object."
        torque = float(self.AVAIL_TORQUE[a])  # Gymnasium's np.append makes it a float64 too
        y0, y1, y2, y3 = s.tolist()  # float32 after a reset: widened exactly, as np.append does
        # rk4 over [0, dt], one step, element by element as NumPy computes its arrays
        dt = self.dt - 0
        dt2 = dt / 2.0
        f = _acrobot_derivatives
        k1 = f(torque, y0, y1, y2, y3)
        k2 = f(torque, y0 + dt2 * k1[0], y1 + dt2 * k1[1], y2 + dt2 * k1[2], y3 + dt2 * k1[3])
        k3 = f(torque, y0 + dt2 * k2[0], y1 + dt2 * k2[1], y2 + dt2 * k2[2], y3 + dt2 * k2[3])
        k4 = f(torque, y0 + dt * k3[0], y1 + dt * k3[1], y2 + dt * k3[2], y3 + dt * k3[3])
        sixth = dt / 6.0
        n0 = y0 + sixth * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
        n1 = y1 + sixth * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
        n2 = y2 + sixth * (k1[2] + 2 * k2[2] + 2 * k3[2] + k4[2])
        n3 = y3 + sixth * (k1[3] + 2 * k2[3] + 2 * k3[3] + k4[3])
        n0 = _wrap(n0, -_PI, _PI)
        n1 = _wrap(n1, -_PI, _PI)
        n2 = min(max(n2, -self.MAX_VEL_1), self.MAX_VEL_1)
        n3 = min(max(n3, -self.MAX_VEL_2), self.MAX_VEL_2)
        self.state = np.array([n0, n1, n2, n3], dtype=np.float64)
        cos, sin = math.cos, math.sin
        terminated = bool(-cos(n0) - cos(n1 + n0) > 1.0)
        reward = -1.0 if not terminated else 0.0
        if self.render_mode == "human":
            self.render()
        obs = np.array([cos(n0), sin(n0), cos(n1), sin(n1), n2, n3], dtype=np.float32)
        return obs, reward, terminated, False, {}


def _wrap(x: float, m: float, M: float) -> float:
    """Gymnasium's `acrobot.wrap`."""
    diff = M - m
    while x > M:
        x = x - diff
    while x < m:
        x = x + diff
    return x


def use_exact_ports(env: gym.Env[Any, Any]) -> None:
    """Step `env`'s base env by its exact port where it has one and nothing differs from what
    the port assumes (the base env keeps its object and attributes; only its class's `step`
    changes). Everything else is left as it is."""
    base = env.unwrapped
    if (
        type(base) is AcrobotEnv
        and _math_is_numpy()
        and all(getattr(base, name) == value for name, value in _ACROBOT_DEFAULTS.items())
    ):
        base.__class__ = ExactAcrobot


@functools.cache
def _math_is_numpy() -> bool:
    """Whether `math.sin`, `math.cos` and `**2` give NumPy's bits for float64 here (a NumPy
    built with its own vector sine would not): checked once per process on angles and speeds
    of Acrobot's range and beyond; where they differ, Gymnasium's code is used."""
    values = np.random.default_rng(0).uniform(-40.0, 40.0, 4096)
    floats = values.tolist()
    for numpy_op, python_op in ((np.cos, math.cos), (np.sin, math.sin)):
        if numpy_op(values).tolist() != [python_op(x) for x in floats]:
            return False
        if any(float(numpy_op(v)) != python_op(x) for v, x in zip(values[:64], floats[:64], strict=True)):
            return False  # NumPy's scalar path too
    return all(float(v**2) == x**2 for v, x in zip(values[:256], floats[:256], strict=True))
