"""Ctrl-C that lands inside rclpy is still a clean shutdown, and only then.

rclpy chains its own SIGINT handler to the Python one installed before `rclpy.init()`. The Python
handler raises KeyboardInterrupt; when that lands inside a pybind11 call (taking a message) it comes
out as a RuntimeError. The flag tells that RuntimeError apart from a real one, which must still fail.
"""
from __future__ import annotations

import signal
from types import FrameType


class SigintFlag:
    """Install before `rclpy.init()`; `seen` says whether a SIGINT arrived."""

    def __init__(self) -> None:
        self.seen = False

    def install(self) -> "SigintFlag":
        signal.signal(signal.SIGINT, self._handler)
        return self

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.seen = True
        raise KeyboardInterrupt

    def interrupted(self, exc: BaseException) -> bool:
        """True when `exc` is how a Ctrl-C surfaced (exit 0); False for a real error (re-raise it)."""
        return isinstance(exc, KeyboardInterrupt) or (isinstance(exc, RuntimeError) and self.seen)
