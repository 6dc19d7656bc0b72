"""Helpers for tests that talk to real nodes over DDS in an isolated domain."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from omni_vla.tools.domains import claim_domain, lock_fds

REPO = Path(__file__).resolve().parents[2]


def free_domain_id(pin: bool = False) -> int:
    """A domain no other process on this machine is using (concurrent CI runs, benchmarks); `pin` for one a whole
    module's tests use (claimed at import, it must outlive every test's claim before them)."""
    return claim_domain(pin=pin)


@contextmanager
def ros_context(domain_id: int) -> Iterator[object]:
    """A private rclpy Context + node + executor on `domain_id`."""
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor

    ctx = Context()
    rclpy.init(context=ctx, domain_id=domain_id)
    node = rclpy.create_node(f"test_probe_{os.getpid()}", context=ctx)
    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    try:
        yield node, ex
    finally:
        ex.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)


def spin_until(ex, condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ex.spin_once(timeout_sec=0.02)
        if bool(condition()):
            return True
    return bool(condition())


@contextmanager
def node_process(module: str, domain_id: int, params_file: Path | None = None,
                 params: dict | None = None) -> Iterator[subprocess.Popen]:
    """Run `python -m module --ros-args ...` in its own process; SIGINT on exit."""
    cmd = [sys.executable, "-m", module, "--ros-args"]
    if params_file is not None:
        cmd += ["--params-file", str(params_file)]
    for k, v in (params or {}).items():
        cmd += ["-p", f"{k}:={v}"]
    env = {**os.environ, "ROS_DOMAIN_ID": str(domain_id)}
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            pass_fds=lock_fds(domain_id))
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def run_against_node(module: str, params_file: Path | None, params: dict, scenario: Callable[..., None]) -> int:
    """Run `scenario(probe, executor)` against `module` in its own process on a fresh domain.

    A failed assertion is re-raised with the node's output appended; returns the node's exit code.
    """
    domain = free_domain_id()
    failure: AssertionError | None = None
    with ros_context(domain) as (probe, ex):
        with node_process(module, domain, params_file, params) as proc:
            try:
                scenario(probe, ex)
            except AssertionError as exc:
                failure = exc
        output = proc.stdout.read() if proc.stdout else ""
    if failure is not None:
        raise AssertionError(f"{failure}\n--- {module} output ---\n{output[-4000:]}") from failure
    return proc.returncode


def call_service(ex, client, request, timeout: float = 10.0, attempts: int = 3):  # noqa: ANN001
    """The response of a service call, asking again when none came: a service can be discovered before its response
    path is matched, and the first reply is then lost (seen once in CI: no reply in 10 s)."""
    for _ in range(attempts):
        future = client.call_async(request)
        if spin_until(ex, future.done, timeout):
            return future.result()
        client.remove_pending_request(future)
    raise AssertionError(f"no reply from {client.service_name} in {attempts} calls of {timeout:g} s")
