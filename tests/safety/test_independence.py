"""The supervisor must keep working when the rest of the stack is broken: check its import graph."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

SAFETY = Path(__file__).resolve().parents[2] / "safety"
FORBIDDEN = ("torch", "executorch", "MNN", "mujoco", "omni_vla", "omni_vla_sim", "omni_vla_policies",
             "cv2", "onnxruntime")
MODULES = ["omni_vla_safety." + p.stem for p in sorted(SAFETY.glob("*.py")) if p.stem != "__init__"]


def test_importing_every_safety_module_loads_no_runtime_policy_or_sim_code() -> None:
    code = (
        "import importlib, json, sys\n"
        f"for m in {MODULES!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "omni_vla_safety.node" in loaded and "rclpy" in loaded  # the check saw the whole package
    bad = [m for m in loaded if m.split(".")[0] in FORBIDDEN]
    assert not bad, f"safety/ pulled in {bad}"


def test_safety_sources_import_only_stdlib_pydantic_yaml_ros_and_themselves() -> None:
    allowed_third_party = {"pydantic", "yaml", "rclpy", "rcl_interfaces", "std_msgs", "std_srvs", "sensor_msgs",
                           "trajectory_msgs", "diagnostic_msgs", "ament_index_python", "omni_vla_safety"}
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    offenders = []
    for path in SAFETY.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for name in names:
                top = name.split(".")[0]
                if top not in stdlib and top not in allowed_third_party:
                    offenders.append(f"{path.name}: {name}")
    assert not offenders, offenders


def test_core_modules_need_no_ros() -> None:
    """limits, limiter, supervisor and bench run on a machine without rclpy (tests, bench, tools)."""
    code = ("import sys; sys.modules['rclpy'] = None\n"
            "import omni_vla_safety.supervisor, omni_vla_safety.bench, omni_vla_safety.limits_sources\n"
            "print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
