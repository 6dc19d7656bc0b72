"""The launch file's Fast DDS discovery profile: given to the nodes only when the user has none of their own."""
from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rosutil import REPO
from scripts import load_script

SITE = REPO.parent / "shared" / "ros2_launch" / "site"
pytestmark = pytest.mark.skipif(not SITE.is_dir(), reason=f"no real ROS 2 launch system here: {SITE} is missing")


@pytest.fixture
def launch_module(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(SITE))
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
    path.unlink()


@pytest.mark.parametrize("var, value", [("FASTRTPS_DEFAULT_PROFILES_FILE", "/etc/robot/dds.xml"),
                                        ("FASTDDS_DEFAULT_PROFILES_FILE", "/etc/robot/dds.xml"),
                                        ("RMW_IMPLEMENTATION", "rmw_cyclonedds_cpp")])
def test_a_users_own_profile_or_another_rmw_is_left_alone(launch_module, monkeypatch, var: str, value: str) -> None:
    monkeypatch.setenv(var, value)
    assert launch_module.dds_environment() == {}
