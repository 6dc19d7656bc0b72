"""The worker process starts clean: a spawned child re-runs the parent's main module unless told not to,
and vla_node's main module imports rclpy and cv2. Checked from a real script run as __main__."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import os, sys
    sys.path[:0] = [{support!r}]
    import rclpy  # what vla_node's main module imports
    with open({marker!r}, "a") as f:
        f.write(f"{{os.getpid()}}\\n")
    if __name__ == "__main__":
        from omni_vla.inference.worker import ProcessInference
        from toy_runtime import toy_factory
        client = ProcessInference("toy", "toy:", factory=toy_factory, startup_timeout_s=30).start()
        maps = open(f"/proc/{{client.pid}}/maps").read()
        print(os.getpid(), client.pid, "librcl.so" in maps, "rclpy" in maps)
        client.close()
""")


def test_worker_does_not_rerun_the_parent_main_module_nor_load_ros(tmp_path: Path) -> None:
    marker = tmp_path / "main_ran_in"
    script = tmp_path / "node_like.py"
    script.write_text(SCRIPT.format(support=str(TESTS / "support"), marker=str(marker)))
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    parent, worker, rcl, rclpy = res.stdout.split()
    assert marker.read_text().split() == [parent], "the main module ran again in the worker"
    assert (rcl, rclpy) == ("False", "False"), "the worker loaded ROS"
    assert worker != parent
