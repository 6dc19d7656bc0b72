"""Launch files and the Python bringup describe the same graph, with parameter files that exist."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import yaml

from omni_vla.graph import ROBOT_NODES, SIM_NODES, config_dir

REPO = Path(__file__).resolve().parent.parent


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return {f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}


def test_launch_files_are_ros2_launch_files_built_from_the_graph_table() -> None:
    for name, table in (("omni_vla.launch.py", "ROBOT_NODES"), ("sim.launch.py", "SIM_NODES")):
        path = REPO / "launch" / name
        imports = _imports(path)
        assert "launch.LaunchDescription" in imports and "launch_ros.actions.Node" in imports
        assert f"omni_vla.graph.{table}" in imports
        assert "def generate_launch_description" in path.read_text()


def test_every_node_has_a_console_script_and_a_parameter_file_for_its_name() -> None:
    setup = (REPO / "setup.py").read_text()
    for spec in SIM_NODES:
        assert re.search(rf'"{spec.executable} = {re.escape(spec.module)}:main"', setup), spec
        params = yaml.safe_load((config_dir() / spec.params_file).read_text())
        assert "ros__parameters" in params[spec.executable], spec.params_file
    assert {s.executable for s in ROBOT_NODES} == {"vla_node", "safety_supervisor"}


def test_bringup_starts_and_stops_the_graph_cleanly(tmp_path: Path) -> None:
    from omni_vla.bringup import Bringup
    from omni_vla.graph import NodeSpec

    specs = (NodeSpec("sim_node", "omni_vla_sim.node", "sim_node.yaml"),
             NodeSpec("safety_supervisor", "omni_vla_safety.node", "safety_supervisor.yaml"))
    import time

    with Bringup(specs=specs, domain_id=199, overrides={"sim_node": {"image_size": 32}}, log_dir=tmp_path) as g:
        time.sleep(4)
        assert g.dead() == [], [(tmp_path / f"{n}.log").read_text()[-2000:] for n in g.dead()]
    codes = {n: p.returncode for n, p in g.procs.items()}
    assert all(c == 0 for c in codes.values()), codes
