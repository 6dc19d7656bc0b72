"""Shared test set-up: headless EGL rendering and DDS isolation per test run."""
from __future__ import annotations

import os
import random

import pytest

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
# One random DDS domain for this pytest process, so concurrent runs never cross-talk.
os.environ.setdefault("ROS_DOMAIN_ID", str(random.Random(os.getpid()).randint(1, 100)))
os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: takes tens of seconds; still runs in CI")
