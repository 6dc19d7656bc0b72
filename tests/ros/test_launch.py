"""Launch files and the Python bringup describe the same graph, with parameter files that exist."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml

from omni_vla.ros.graph import ROBOT_NODES, SIM_NODES, config_dir, rate_overrides

REPO = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return {f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}


def test_launch_files_are_ros2_launch_files_built_from_the_graph_table() -> None:
    for name, table in (("omni_vla.launch.py", "ROBOT_NODES"), ("sim.launch.py", "SIM_NODES")):
        path = REPO / "launch" / name
        imports = _imports(path)
        assert "launch.LaunchDescription" in imports and "launch_ros.actions.Node" in imports
        assert f"omni_vla.ros.graph.{table}" in imports
        assert "def generate_launch_description" in path.read_text()


def test_every_node_has_a_console_script_and_a_parameter_file_for_its_name() -> None:
    setup = (REPO / "setup.py").read_text()
    for spec in SIM_NODES:
        assert re.search(rf'"{spec.executable} = {re.escape(spec.module)}:run"', setup), spec
        params = yaml.safe_load((config_dir() / spec.params_file).read_text())
        assert "ros__parameters" in params[spec.executable], spec.params_file
    assert {s.executable for s in ROBOT_NODES} == {"vla_node", "safety_supervisor"}


def test_bringup_starts_and_stops_the_graph_cleanly(tmp_path: Path) -> None:
    from rosutil import free_domain_id, ros_context, spin_until
    from std_msgs.msg import Float64MultiArray, String

    from omni_vla.tools.bringup import Bringup
    from omni_vla.ros.graph import NodeSpec

    specs = (NodeSpec("sim_node", "omni_vla_sim.node", "sim_node.yaml"),
             NodeSpec("safety_supervisor", "omni_vla_safety.node", "safety_supervisor.yaml"))
    domain = free_domain_id()
    with Bringup(specs=specs, domain_id=domain, overrides={"sim_node": {"image_size": 32}}, log_dir=tmp_path) as g:
        with ros_context(domain) as (node, ex):
            seen: dict[str, object] = {}
            node.create_subscription(String, "/sim/status", lambda m: seen.setdefault("sim", m), 10)
            node.create_subscription(Float64MultiArray, "/forward_position_controller/commands",
                                     lambda m: seen.setdefault("hold", m), 10)
            # The supervisor holds the measured pose as soon as the sim publishes joint states.
            assert spin_until(ex, lambda: len(seen) == 2, 60), (seen, g.dead())
        assert g.dead() == [], [(tmp_path / f"{n}.log").read_text()[-2000:] for n in g.dead()]
    codes = {n: p.returncode for n, p in g.procs.items()}
    assert all(c == 0 for c in codes.values()), codes


def test_a_launch_rate_sets_vla_nodes_rate_and_raises_the_supervisors_command_timeout_to_four_periods(
        tmp_path: Path) -> None:
    file = tmp_path / "safety_supervisor.yaml"
    file.write_text("safety_supervisor:\n  ros__parameters:\n    command_timeout_s: 0.2\n")
    assert rate_overrides("", file) == {}
    assert rate_overrides("0", file) == {"vla_node": {"rate_hz": 0.0}}, "0: the bundle's rate, timeout unknown"
    assert rate_overrides(" 2 ", file) == {"vla_node": {"rate_hz": 2.0}, "safety_supervisor": {"command_timeout_s": 2.0}}
    assert rate_overrides("0.4", file)["safety_supervisor"] == {"command_timeout_s": 10.0}
    assert rate_overrides("50", file) == {"vla_node": {"rate_hz": 50.0}}, "never lowered below the file's 0.2 s"
    file.write_text("safety_supervisor:\n  ros__parameters:\n    command_timeout_s: 5.0\n")
    assert rate_overrides("1", file) == {"vla_node": {"rate_hz": 1.0}}
    assert rate_overrides("0.5", file)["safety_supervisor"] == {"command_timeout_s": 8.0}
    file.write_text("safety_supervisor:\n  ros__parameters:\n    rate_hz: 100.0\n")
    assert rate_overrides("10", file)["safety_supervisor"] == {"command_timeout_s": 0.4}, "the default 0.2 s"


@pytest.mark.parametrize("text", ["fast", "-1", "0.39", "1001", "inf", "nan"])
def test_a_launch_rate_the_supervisor_cannot_follow_is_refused_in_one_line(text: str, tmp_path: Path) -> None:
    file = tmp_path / "safety_supervisor.yaml"
    file.write_text("safety_supervisor:\n  ros__parameters:\n    command_timeout_s: 0.2\n")
    with pytest.raises(ValueError) as err:
        rate_overrides(text, file)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"rate_hz:={text!r}: expected 0 (the bundle's rate) or 0.4 to 1000 Hz")
