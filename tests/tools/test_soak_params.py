"""The soak benchmark runs the graph with the parameters it was given, in a copy of the install's config directory."""
from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

import pytest
import yaml
from scripts import load_script

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def soak():
    return load_script("benchmarks/soak/run.py", "soak_bench")


def _install(tmp_path: Path) -> Path:
    config = tmp_path / "install" / "share" / "omni_vla" / "config"
    config.mkdir(parents=True)
    for name in ("vla_node.yaml", "safety_supervisor.yaml", "joint_limits.yaml"):
        (config / name).write_text((REPO / "config" / name).read_text())
    return tmp_path / "install"


def test_a_parameter_is_set_in_the_copy_and_the_installed_file_is_untouched(soak, tmp_path):
    install = _install(tmp_path)
    params = [soak.node_param("vla_node:rate_hz=2"), soak.node_param('vla_node:worker_cpus="1"'),
              soak.node_param("safety_supervisor:command_timeout_s=1.5")]
    out = soak.config_dir(install, tmp_path / "config", params)
    vla = yaml.safe_load((out / "vla_node.yaml").read_text())["vla_node"]["ros__parameters"]
    sup = yaml.safe_load((out / "safety_supervisor.yaml").read_text())["safety_supervisor"]["ros__parameters"]
    assert vla["rate_hz"] == 2 and vla["worker_cpus"] == "1" and sup["command_timeout_s"] == 1.5
    assert vla["bundle_dir"] == yaml.safe_load((REPO / "config" / "vla_node.yaml").read_text())["vla_node"][
        "ros__parameters"]["bundle_dir"]  # the rest of the file is kept
    installed = (install / "share" / "omni_vla" / "config" / "vla_node.yaml").read_text()
    assert installed == (REPO / "config" / "vla_node.yaml").read_text()
    assert (out / "joint_limits.yaml").is_file()


def test_a_parameter_for_a_node_without_a_file_is_refused(soak, tmp_path):
    with pytest.raises(SystemExit, match="no parameter file sim_nod.yaml"):
        soak.config_dir(_install(tmp_path), tmp_path / "config", [soak.node_param("sim_nod:rate_hz=2")])


@pytest.mark.parametrize("text", ["rate_hz=2", "vla_node:rate_hz", ":rate_hz=2", "vla_node:=2"])
def test_a_malformed_parameter_is_refused_naming_the_form(soak, text):
    with pytest.raises(argparse.ArgumentTypeError, match="expected NODE:KEY=VALUE"):
        soak.node_param(text)


def test_ratios_are_the_worst_windows_of_policy_over_reference(soak):
    policy = {"windows": [{"p99_lateness_ms": {"vla_node": 1.0, "safety_supervisor": 0.5}},
                          {"p99_lateness_ms": {"vla_node": 3.0, "safety_supervisor": 0.4}}]}
    reference = {"windows": [{"p99_lateness_ms": {"vla_node": 2.0}}]}
    assert soak.ratios(policy, reference) == {"vla_node_p99_lateness": 1.5, "safety_supervisor_p99_lateness": None}


def test_a_window_carries_the_supervisors_interventions_by_kind(soak):
    latest = {"safety_supervisor": {"clamps_total": "12", "interventions/rejected_out_of_range": "7",
                                    "interventions/watchdog_command": "1", "state": "hold"},
              "vla_node": {"missed_ticks": "0", "tick_lateness_max_ms": "4.25"}}
    w = soak.window_record(60.0, latest, {"vla_node": 0.1}, {}, 0.0)
    assert w["max_lateness_ms"] == {"vla_node": 4.25, "safety_supervisor": None}
    assert w["supervisor"]["interventions"] == {"rejected_out_of_range": 7, "watchdog_command": 1}
    assert w["supervisor"]["clamps_total"] == 12 and w["supervisor_state"] == "hold"


def test_the_machines_busy_cores_count_cpu_this_process_burns() -> None:
    procstats = load_script("benchmarks/soak/procstats.py", "soak_procstats_under_test")
    before, t0, cpu0 = procstats.machine_cpu(), time.monotonic(), time.process_time()
    while time.process_time() < cpu0 + 0.3:
        pass
    use = procstats.cpu_use(before, procstats.machine_cpu(), time.monotonic() - t0)
    assert use["busy_cores"] >= 0.5 and 0.0 <= use["stolen_cores"] <= use["busy_cores"]
    assert procstats.cpu_use((10.0, 1.0), (13.0, 1.5), 2.0) == {"busy_cores": 1.5, "stolen_cores": 0.25}


def test_a_window_carries_the_machine_probes_worst_lateness_beside_the_nodes(soak):
    latest = {"vla_node": {"tick_lateness_max_ms": "0.2"}}
    w = soak.window_record(60.0, latest, {"vla_node": 0.1}, {}, 0.0, {"p99": 0.05, "max": 0.3}, {"vla_node": 4.0})
    assert w["p99_lateness_ms"] == {"vla_node": 0.1, "machine_probe": 0.05}
    assert w["max_lateness_ms"] == {"vla_node": 4.0, "safety_supervisor": None, "machine_probe": 0.3}
    assert "machine_probe" not in soak.window_record(60.0, {}, {}, {}, 0.0, {})["p99_lateness_ms"]


def test_drift_beyond_the_machine_is_each_nodes_p99_over_the_probes_worst_window_over_first(soak):
    def w(vla, sup, probe):
        return {"p99_lateness_ms": {"vla_node": vla, "safety_supervisor": sup, "machine_probe": probe}}
    # the machine doubles its lateness in window 2: the supervisor follows it (no drift), vla_node triples
    windows = [w(0.1, 0.5, 0.2), w(0.6, 1.0, 0.4), w(0.1, 0.5, 0.2)]
    assert soak.over_probe(windows) == {"vla_node": 3.0, "safety_supervisor": 1.0}
    assert soak.over_probe([w(0.1, 0.5, 0.2), {"p99_lateness_ms": {"vla_node": 0.2}}]) == {}


def test_the_machine_probe_runs_beside_a_soak_and_reports_its_lateness():
    probe = load_script("benchmarks/soak/probe.py", "soak_probe_under_test").Probe(rate_hz=200.0)
    try:
        time.sleep(2.5)
        worst = probe.take_window()
    finally:
        probe.close()
    assert probe.proc.returncode is not None and probe.status.startswith("SCHED_FIFO 90")
    if "unavailable" in probe.status:
        pytest.skip(f"no real-time privilege here: {probe.status}")
    assert 0.0 <= worst["p99"] <= worst["max"] < 1000.0
    assert probe.take_window() == {}


def test_the_soak_keeps_each_nodes_worst_p99_and_max_of_a_window_and_starts_over(soak):
    from types import SimpleNamespace

    def msg(name, p99, worst):
        kv = [SimpleNamespace(key="tick_lateness_p99_ms", value=p99), SimpleNamespace(key="tick_lateness_max_ms",
                                                                                     value=worst)]
        return SimpleNamespace(status=[SimpleNamespace(name=name, values=kv)])

    diags = SimpleNamespace(lock=threading.Lock(), latest={}, p99_max={}, late_max={})
    for m in (msg("vla_node: control loop", "0.2", "3.0"), msg("vla_node: control loop", "0.5", "1.0"),
              msg("safety_supervisor", "nan", "x"), msg("vla_node: control loop", "0.1", "0.4")):
        soak.Diagnostics._on_diag(diags, m)
    latest, p99, worst = soak.Diagnostics.take_window(diags)
    assert (p99, worst) == ({"vla_node": 0.5}, {"vla_node": 3.0})
    assert latest["vla_node"]["tick_lateness_max_ms"] == "0.4"
    assert soak.Diagnostics.take_window(diags)[1:] == ({}, {})
