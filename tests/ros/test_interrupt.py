"""Ctrl-C during rclpy is a clean shutdown for every node; any other RuntimeError still fails."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from omni_vla.ros.interrupt import SigintFlag

# Installs the node's handler, then rclpy.init (which chains its own handler to it), then Ctrl-C.
_SCRIPT = """
import json, os, signal, time, rclpy
{install}
rclpy.init()
try:
    os.kill(os.getpid(), signal.SIGINT)
    raised = False
except KeyboardInterrupt:
    raised = True
deadline = time.monotonic() + 5.0  # rclpy shuts its context down from its own signal thread
while rclpy.ok() and time.monotonic() < deadline:
    time.sleep(0.01)
print(json.dumps({{"raised": raised, "seen": {seen}, "rclpy_ok": rclpy.ok()}}))
rclpy.try_shutdown()
"""

NODES = {
    "vla_node/sim_node": ("from omni_vla.ros.interrupt import SigintFlag\nflag = SigintFlag().install()", "flag.seen"),
    "safety_supervisor": ("from omni_vla_safety.node import _Sigint\nsignal.signal(signal.SIGINT, _Sigint.handler)",
                          "_Sigint.seen"),
}


@pytest.mark.parametrize("node", sorted(NODES))
def test_sigint_after_rclpy_init_reaches_the_node_handler_and_shuts_rclpy_down(node: str) -> None:
    install, seen = NODES[node]
    out = subprocess.run([sys.executable, "-c", _SCRIPT.format(install=install, seen=seen)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report == {"raised": True, "seen": True, "rclpy_ok": False}


def test_runtime_error_is_a_clean_shutdown_only_after_a_sigint() -> None:
    flag = SigintFlag()
    assert flag.interrupted(KeyboardInterrupt())
    assert not flag.interrupted(RuntimeError("Unable to convert call argument '0'"))
    assert not flag.interrupted(ValueError("bad parameter"))
    flag.seen = True
    assert flag.interrupted(RuntimeError("Unable to convert call argument '0'"))
    assert not flag.interrupted(ValueError("bad parameter"))
