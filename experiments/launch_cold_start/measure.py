"""Cold start from `ros2 launch omni_vla omni_vla.launch.py` (MNN), N launches against one colcon install space.

    python experiments/launch_cold_start/measure.py INSTALL_PREFIX N [--probe-profile] > runs.jsonl

INSTALL_PREFIX is `<ws>/install/omni_vla` of a `colcon build` of this checkout; the real launch system comes
from ../shared/ros2_launch. Each launch runs exactly as `tests/ros/test_launch_install.py` runs it (its helpers:
a namespace, a fake robot and a probe node in this process); one JSON line per launch with the seconds from the
launch start to: nodes started, vla_node configured, active, first proposal, first safe command after it.
`--probe-profile`: this process's DDS participant uses the quick-discovery Fast DDS profile the launch file
gives its nodes, as a robot's drivers would be told to (without it, about half of the launches wait for the
3 s announcement between the probe and vla_node).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def profile_xml() -> str:
    """The launch file's own profile text (one source)."""
    text = (REPO / "launch" / "omni_vla.launch.py").read_text()
    return text.split('FASTDDS_PROFILE = """', 1)[1].split('"""', 1)[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("install", type=Path)
    parser.add_argument("runs", type=int)
    parser.add_argument("--probe-profile", action="store_true")
    args = parser.parse_args()
    if args.probe_profile:  # before rclpy is loaded: Fast DDS reads its profiles once per process
        path = Path(tempfile.mkdtemp()) / "quick_discovery.xml"
        path.write_text(profile_xml())
        os.environ["FASTRTPS_DEFAULT_PROFILES_FILE"] = str(path)
    sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "ros"), str(REPO / "tests" / "support")]
    import test_launch_install as launch_test  # the test's own launch and probe helpers

    for _ in range(args.runs):
        run = launch_test._run_graph(args.install, Path(tempfile.mkdtemp()), "omni_vla.launch.py", True, "robot1",
                                     "backend:=mnn")
        print(json.dumps({**run["seen"], "exit_code": run["code"]}), flush=True)
        time.sleep(2.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
