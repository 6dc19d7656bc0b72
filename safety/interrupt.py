"""A stop request (Ctrl-C, or SIGTERM from launch's escalation, systemd or docker) that lands inside rclpy is
still a clean shutdown, and only then.

rclpy chains its own SIGINT/SIGTERM handlers to the Python ones installed before `rclpy.init()`. The Python
handler raises KeyboardInterrupt; when that lands inside a pybind11 call (taking a message, building a wait
set on the context rclpy's signal thread just shut down) it comes out as a RuntimeError. The flag tells
that RuntimeError apart from a real one, which must still fail.

Every node process of the project (safety_supervisor, vla_node, sim_node) stops this way; it lives in
safety/ because the supervisor imports nothing of the rest of the project.

Once a node has done its own cleanup (the supervisor's last command out, the inference worker stopped, every ROS
entity and the context destroyed), `exit_process` ends it without the interpreter's finalisation: tearing down the
imported modules (MuJoCo, MNN, rclpy and its DDS participant) took 0.5-1.7 s after the node had finished its
cleanup on the 2-core machine under load, and that is what kept nodes running past launch's patience.
"""
from __future__ import annotations

import os
import signal
import sys
from contextlib import contextmanager
from types import FrameType
from typing import Callable, Iterator, NoReturn

import rclpy
from rclpy.executors import Executor, ExternalShutdownException
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

from omni_vla_safety.errors import one_line


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class SigintFlag:
    """Install before `rclpy.init()`; `seen` says whether a stop signal (SIGINT or SIGTERM) arrived.

    Before rclpy is initialised the signal raises KeyboardInterrupt (start-up stops at once). After, it does not:
    rclpy's own handler (chained in front of this one for SIGINT and SIGTERM) shuts the context down and the
    executor's spin ends with ExternalShutdownException; a KeyboardInterrupt raised at an arbitrary bytecode inside
    rclpy's executor left half-built Task objects behind ("Exception ignored in Future.__del__"). Once disarmed (on
    the way out) nothing raises, so the cleanup runs to its end.
    """

    def __init__(self) -> None:
        self.seen = False
        self.armed = True
        self.ros_started = False

    def install(self) -> "SigintFlag":
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._handler)
        return self

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        first = not self.seen
        self.seen = True
        if first and self.armed and not self.ros_started:
            raise KeyboardInterrupt

    def interrupted(self, exc: BaseException, context_shut_down: bool = False) -> bool:
        """True when `exc` is how a stop signal surfaced (exit 0); False for a real error (re-raise it).

        A RuntimeError counts when the signal was seen, or when rclpy's context is already shut down (its
        signal thread does that before the Python handler runs: an RCLError "context is not valid" then
        comes first)."""
        return isinstance(exc, KeyboardInterrupt) or (isinstance(exc, RuntimeError) and (self.seen or context_shut_down))


def quiet_half_built_executors(flag: SigintFlag) -> None:
    """After a stop signal, drop the one known false traceback: rclpy's `Executor.__del__` reads `_sigint_gc`, which
    its `__init__` never set when the signal had already shut the context down (`rclpy.spin` builds its executor
    after the node, so a SIGTERM while the node starts lands there). Anything else, and anything before a stop
    signal, still reaches the default hook."""
    default = sys.unraisablehook

    def hook(args: "sys.UnraisableHookArgs") -> None:
        if flag.seen and isinstance(args.exc_value, AttributeError) and "_sigint_gc" in str(args.exc_value):
            return
        default(args)

    sys.unraisablehook = hook


@contextmanager
def ros_main(argv: list[str] | None, cleanup: list[Callable[[], object]],
             before_init: Callable[[], object] | None = None, rclpy_signals: bool = True,
             name: str = "") -> Iterator[SigintFlag]:
    """A node process's life: stop-signal handling, rclpy.init, and on the way out (clean or not) the callables
    in `cleanup` (filled in as the body creates things), rclpy's shutdown and the context's destruction (its DDS
    participant leaves the graph now, not at interpreter exit). A Ctrl-C or an external shutdown (or SIGTERM)
    ends the body cleanly; any other error still propagates.

    `before_init` runs once the handlers are in, before rclpy.init: what the threads rclpy and DDS start must
    inherit (the supervisor's real-time priority). `rclpy_signals=False` keeps rclpy from shutting the context down
    on a stop signal: the flag alone ends the spin (spin_until_stopped), and the node can still publish on its way
    out (the supervisor's controlled stop)."""
    sigint = SigintFlag().install()
    quiet_half_built_executors(sigint)
    try:
        if before_init is not None:
            before_init()
        try:
            rclpy.init(args=argv if argv is not None else sys.argv,
                       signal_handler_options=None if rclpy_signals else SignalHandlerOptions.NO)
        except RuntimeError as exc:  # malformed --ros-args, an unreadable params file: one line, exit 1
            if sigint.seen:
                raise
            name = name or os.path.basename((argv or sys.argv or ["node"])[0])
            raise SystemExit(f"{name}: refusing to start: rclpy could not start: {one_line(str(exc))}") from None
        sigint.ros_started = True
        yield sigint
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except RuntimeError as exc:
        if not sigint.interrupted(exc, context_shut_down=sigint.ros_started and not rclpy.ok()):
            raise
    finally:
        sigint.armed = False
        for fn in cleanup:
            fn()
        rclpy.try_shutdown()
        rclpy.get_default_context().destroy()


def exit_process(code: int) -> NoReturn:
    """End a node process that has done its own cleanup (ros_main): flush its output, then exit at once with `code`,
    skipping the interpreter's finalisation (atexit handlers and module teardown; see the module's docstring).
    Only for a node's entry point, never inside a library call."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def spin_until_stopped(node: Node, flag: SigintFlag, poll_s: float = 0.1, executor: Executor | None = None) -> None:
    """`rclpy.spin(node)` that a stop signal ends within `poll_s` even when rclpy's own handling misses it: about
    1 SIGINT in 10 on a loaded machine left the executor in its wait 8 s later
    (docs/decisions/0007-spin-with-a-timeout-on-stop-signals.md)."""
    executor = executor if executor is not None else rclpy.get_global_executor()
    executor.add_node(node)
    try:
        while executor.context.ok() and not flag.seen:
            executor.spin_once(timeout_sec=poll_s)
    finally:
        executor.remove_node(node)
