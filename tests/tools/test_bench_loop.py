"""`omni-vla bench loop`: the real-time loop benchmark runs end to end and reports what it claims."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rosutil import REPO
from tiny_bundles import tiny_bundle


@pytest.mark.slow
def test_cloud_runs_are_interleaved_with_local_ones_and_really_splice_plans(tmp_path_factory) -> None:
    bundle = tiny_bundle(tmp_path_factory)
    cmd = [sys.executable, "-m", "omni_vla.tools.bench_loop", "--bundle", str(bundle), "--backends", "mnn",
           "--rates", "50", "--ticks", "150", "--rounds", "2", "--heap-ticks", "50", "--no-cold-start", "--rt-priority", "0",
           "--cloud", "--cloud-latency-ms", "100", "--replan-cadence", "0.5",
           "--cloud-network", "process,thread", "--json"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    local = out["mnn@50"]
    assert "cloud" not in local and local["feeder_scheduling"] == "normal"  # --rt-priority 0: both threads normal
    for name, network in (("mnn@50+cloud", "process"), ("mnn@50+cloud-thread", "thread")):
        cloud = out[name]
        assert local["ticks"] == cloud["ticks"] == 300 and cloud["cloud"]["network"] == network
        assert cloud["rounds"] == 2 and len(cloud["p99_lateness_ms_per_round"]) == 2
        lo, hi = min(cloud["p99_lateness_ms_per_round"]), max(cloud["p99_lateness_ms_per_round"])
        assert 0.9 * lo - 1e-3 <= cloud["p99_lateness_ms"] <= 1.1 * hi + 1e-3  # pooled over both rounds
        assert cloud["cloud"]["connected"] and cloud["cloud"]["plans_spliced"] >= 2, cloud["cloud"]
        assert cloud["cloud"]["rejected"] == 0
        assert cloud["p99_lateness_ratio_vs_no_cloud"] == pytest.approx(
            cloud["p99_lateness_ms"] / max(local["p99_lateness_ms"], 1e-6), rel=1e-2)
    assert out["settings"]["cloud_latency_ms"] == 100.0


@pytest.mark.parametrize("rates", ["2500", "50,0", "fast"])
def test_a_rate_the_loop_cannot_run_is_refused_in_one_line(rates: str) -> None:
    res = subprocess.run([sys.executable, "-m", "omni_vla.tools.bench_loop", "--bundle", "bundles/reference",
                          "--rates", rates, "--json"], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert res.returncode == 2 and res.stdout == ""
    assert "--rates" in res.stderr and "<= 1000" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.slow
def test_a_loop_that_fails_to_assemble_stops_its_worker_process(tmp_path_factory) -> None:
    import multiprocessing

    from omni_vla.tools.bench_loop import LoopRig, parse_args

    args = parse_args(["--bundle", str(tiny_bundle(tmp_path_factory)), "--backends", "mnn"])
    before = set(multiprocessing.active_children())
    with pytest.raises(ValueError, match="rate_hz"):
        LoopRig(args, "mnn", 2500.0)  # past LoopSettings' bound, after the worker has started
    assert [c for c in multiprocessing.active_children() if c not in before] == []
