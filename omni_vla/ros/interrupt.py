"""A stop request (Ctrl-C, or SIGTERM from launch's escalation, systemd or docker) that lands inside rclpy is
still a clean shutdown, and only then.

rclpy chains its own SIGINT/SIGTERM handlers to the Python ones installed before `rclpy.init()`. The Python
handler raises KeyboardInterrupt; when that lands inside a pybind11 call (taking a message, building a wait
set on the context rclpy's signal thread just shut down) it comes out as a RuntimeError. The flag tells
that RuntimeError apart from a real one, which must still fail.
"""
from __future__ import annotations

import signal
import sys
from contextlib import contextmanager
from types import FrameType
from typing import Callable, Iterator

import rclpy
from rclpy.executors import ExternalShutdownException


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class SigintFlag:
    """Install before `rclpy.init()`; `seen` says whether a stop signal (SIGINT or SIGTERM) arrived."""

    def __init__(self) -> None:
        self.seen = False

    def install(self) -> "SigintFlag":
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._handler)
        return self

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.seen = True
        raise KeyboardInterrupt

    def interrupted(self, exc: BaseException) -> bool:
        """True when `exc` is how a stop signal surfaced (exit 0); False for a real error (re-raise it)."""
        return isinstance(exc, KeyboardInterrupt) or (isinstance(exc, RuntimeError) and self.seen)


@contextmanager
def ros_main(argv: list[str] | None, cleanup: list[Callable[[], object]]) -> Iterator[SigintFlag]:
    """A node process's life: stop-signal handling, rclpy.init, and on the way out (clean or not) the callables
    in `cleanup` (filled in as the body creates things) and rclpy's shutdown. A Ctrl-C or an external
    shutdown (or SIGTERM) ends the body cleanly; any other error still propagates."""
    sigint = SigintFlag().install()
    rclpy.init(args=argv if argv is not None else sys.argv)
    try:
        yield sigint
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except RuntimeError as exc:
        if not sigint.interrupted(exc):
            raise
    finally:
        for fn in cleanup:
            fn()
        rclpy.try_shutdown()
