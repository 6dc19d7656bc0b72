"""The launch file's Fast DDS discovery profile: given to the nodes only when the user has none of their own."""
from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from rosutil import REPO
from scripts import load_script

SITE = REPO.parent / "shared" / "ros2_launch" / "site"
pytestmark = pytest.mark.skipif(not SITE.is_dir(), reason=f"no real ROS 2 launch system here: {SITE} is missing")


@pytest.fixture
def launch_module(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.syspath_prepend(str(SITE))
    monkeypatch.setenv("ROS_HOME", str(tmp_path / "ros_home"))
    for var in ("FASTRTPS_DEFAULT_PROFILES_FILE", "FASTDDS_DEFAULT_PROFILES_FILE", "RMW_IMPLEMENTATION"):
        monkeypatch.delenv(var, raising=False)
    yield load_script("launch/omni_vla.launch.py", "omni_vla_launch_under_test")
    sys.modules.pop("omni_vla_launch_under_test", None)


def test_nodes_get_a_profile_announcing_every_100_ms_for_3_s_by_default(launch_module) -> None:
    env = launch_module.dds_environment()
    path = Path(env["FASTRTPS_DEFAULT_PROFILES_FILE"])
    ns = {"p": "http://www.eprosima.com/XMLSchemas/fastRTPS_Profiles"}
    root = ET.parse(path).getroot()
    ann = root.find("p:participant/p:rtps/p:builtin/p:discovery_config/p:initialAnnouncements", ns)
    assert root.find("p:participant", ns).get("is_default_profile") == "true"
    assert ann.findtext("p:count", namespaces=ns) == "30"
    assert ann.findtext("p:period/p:nanosec", namespaces=ns) == "100000000"


def test_launching_again_reuses_the_files_instead_of_leaving_copies(launch_module, tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    (config / "vla_node.yaml").write_text((REPO / "config" / "vla_node.yaml").read_text())
    first = [launch_module.dds_environment(), launch_module._params_file(str(config), "vla_node", True)]
    again = [launch_module.dds_environment(), launch_module._params_file(str(config), "vla_node", True)]
    assert first == again
    kept = sorted(p.name for p in (tmp_path / "ros_home" / "omni_vla").iterdir())
    assert len(kept) == 2 and kept[0].startswith("fastdds_") and kept[1].startswith("vla_node_")
    assert set(yaml.safe_load(Path(first[1]).read_text())) == {"/**/vla_node"}


def test_launch_arguments_reach_a_node_as_strings_in_one_kept_file(launch_module, tmp_path: Path) -> None:
    """A bundle directory named `1e3` or `true` stays a string (the node's parameter is one), as launch_ros's
    ParameterValue(value_type=str) kept it."""
    values = {"use_sim_time": False, "bundle_dir": "1e3", "backend": "true", "joint_limits_file": "inf"}
    path = launch_module._overrides_file("vla_node", values)
    assert launch_module._overrides_file("vla_node", dict(values)) == path
    assert yaml.safe_load(Path(path).read_text()) == {"/**/vla_node": {"ros__parameters": values}}
    text = Path(path).read_text()  # rcl types unquoted scalars itself: every string is quoted, the bool is not
    assert "bundle_dir: '1e3'" in text and "joint_limits_file: 'inf'" in text and "use_sim_time: false" in text
    assert Path(path).parent == tmp_path / "ros_home" / "omni_vla"


def test_a_kept_file_changed_by_someone_else_is_written_again(launch_module) -> None:
    path = Path(launch_module.dds_environment()["FASTRTPS_DEFAULT_PROFILES_FILE"])
    path.write_text("<profiles/>")
    assert launch_module.dds_environment() == {"FASTRTPS_DEFAULT_PROFILES_FILE": str(path)}
    assert path.read_text() == launch_module.FASTDDS_PROFILE


@pytest.mark.parametrize("var, value", [("FASTRTPS_DEFAULT_PROFILES_FILE", "/etc/robot/dds.xml"),
                                        ("FASTDDS_DEFAULT_PROFILES_FILE", "/etc/robot/dds.xml"),
                                        ("RMW_IMPLEMENTATION", "rmw_cyclonedds_cpp")])
def test_a_users_own_profile_or_another_rmw_is_left_alone(launch_module, monkeypatch, var: str, value: str) -> None:
    monkeypatch.setenv(var, value)
    assert launch_module.dds_environment() == {}
