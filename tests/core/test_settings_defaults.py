"""Every default of vla_node lives in one place (omni_vla/core/settings.py): the shipped parameter file states only
what the deployment sets differently, so changing a default cannot leave a stale copy that silently wins."""
from __future__ import annotations

from pathlib import Path

import yaml

from omni_vla.core.settings import VlaNodeConfig, load_node_yaml, node_settings

PARAMS_FILE = Path(__file__).resolve().parents[2] / "config" / "vla_node.yaml"


def _defaults() -> dict:
    return VlaNodeConfig.model_validate({"bundle_dir": "x"}).model_dump()


def _flat_default(name: str):  # noqa: ANN202
    head, _, tail = name.partition(".")
    value = _defaults()[head]
    return value[tail] if tail else value


def test_the_shipped_parameter_file_restates_no_default() -> None:
    restated = {k: v for k, v in load_node_yaml(PARAMS_FILE).items()
                if k != "bundle_dir" and _flat_default(k) == v}
    assert not restated, f"config/vla_node.yaml restates defaults of VlaNodeConfig: {restated}"


def test_what_the_node_runs_with_its_file_is_the_defaults_plus_the_files_values() -> None:
    runs = node_settings(PARAMS_FILE).model_dump()
    given = yaml.safe_load(PARAMS_FILE.read_text())["vla_node"]["ros__parameters"]
    expected = {**_defaults(), **given, "bundle_dir": Path(given["bundle_dir"])}
    assert runs == expected


def test_the_node_defaults_take_rate_and_horizon_from_the_bundle_and_shape_commands() -> None:
    d = _defaults()
    assert (d["rate_hz"], d["execution_horizon"]) == (0.0, 0)  # 0: the bundle's control_rate_hz / execute_steps
    assert d["splice_blend_ticks"] > 0 and 0 < d["command_accel_fraction"] < 1
    assert d["autostart"] is True and d["realtime_priority"] == 50
